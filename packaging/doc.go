// Package packaging holds no code: the directory holds the sources of the
// packaged forms of siteboot (the systemd unit, the sysusers.d entry, the
// packaged configuration, the Debian control files and maintainer scripts,
// the release script), and its tests check them: the unit's hardening score
// under systemd-analyze, the directives it must keep, a .deb installed,
// upgraded and purged in a clean Debian root, and a release's SHA256SUMS
// and SBOM.
package packaging
