// Package images owns the first-stage boot files of a siteboot appliance:
// the iPXE builds that raw PXE firmware fetches before it can run an iPXE
// script (docs/firmware.md, rules 7 and 11).
//
// Load scans one directory (boot_files.dir; by default the first of
// DefaultDirs that exists) once, hashing every regular file it takes with
// SHA-256. The resulting Set
//
//   - names the default boot file per client arch (BootFile), using the
//     arch names of RFC 4578 option 93 as docs/firmware.md rule 7 spells them
//     ("bios", "x86_64-efi", "arm64-efi", ...);
//   - lists the files with their sizes and digests for status (Files);
//   - opens a file by exact name for the TFTP server (Open), refusing any
//     name outside the set and any file whose size, mtime, ctime or identity
//     changed since it was hashed, so the bytes served always match the
//     digest shown;
//   - serves GET and HEAD /boot/<name> over HTTP with ranges (Handler).
//
// A missing or empty directory is not an error: iPXE-native clients (QEMU's
// option ROMs, iPXE on NICs) never ask for a first stage, so the appliance
// runs and Load logs once which package to install.
package images
