// Package secretref parses and resolves secret references: the strings that
// stand in for a secret value in entries and requests (discovery tokens, BMC
// credentials, secret headers). A reference names where the value lives;
// the value itself is read only when it is needed and is never logged.
//
// Schemes:
//
//	env://NAME        the environment variable NAME of the appliance process
//	file:///abs/path  the whole content of a file, one trailing newline removed
package secretref
