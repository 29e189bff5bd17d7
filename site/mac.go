package site

import "github.com/siteboot/siteboot/bootentry"

// NormalizeMAC is bootentry.NormalizeMAC: an EUI-48 in any common notation,
// returned in lowercase colon form.
func NormalizeMAC(s string) (string, error) { return bootentry.NormalizeMAC(s) }

// NormalizeUUID is bootentry.NormalizeUUID: a UUID in any common notation,
// returned as lowercase 8-4-4-4-12.
func NormalizeUUID(s string) (string, error) { return bootentry.NormalizeUUID(s) }
