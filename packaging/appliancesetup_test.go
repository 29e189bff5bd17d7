package packaging

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

const setupScript = "appliance/root/usr/lib/siteboot/appliance-setup"

// The appliance's set-up runs against the real disks and /etc of a booted
// image; these tests run its functions (the script sourced with
// APPLIANCE_SETUP_FUNCTIONS_ONLY) with stub lsblk, blkid, findmnt, mount
// and usermod in PATH, and the paths it writes pointed into a temporary
// directory, so the decisions (what is blank, what is copied, when root is
// locked) are checked without touching a disk.

// stubs writes the stub commands into dir/bin. lsblk and blkid read their
// answers from files under dir/disks: NAME.type, .ro, .rm, .tran, .parts
// (lines of lsblk -nro NAME), .blkid (blkid -p's exit code); the device
// itself is the file dir/disks/NAME.
func stubs(t *testing.T, dir, bootDisk, configDev string) {
	t.Helper()
	bin := filepath.Join(dir, "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	d := filepath.Join(dir, "disks")
	files := map[string]string{
		"lsblk": `#!/bin/sh
d=` + d + `
case "$1" in
-dnpo)
	for f in $d/*.type; do
		n=${f%.type}
		echo "$n $(cat $n.type) $(cat $n.ro) $(cat $n.rm) $(cat $n.tran 2>/dev/null)"
	done ;;
-npo) [ "$3" = "` + d + `/boot3" ] && echo "` + filepath.Join(d, bootDisk) + `" ;;
-nro) if [ -f "$3.parts" ]; then cat "$3.parts"; else basename "$3"; fi ;;
-dnbo) stat -c %s "$3" ;;
*) echo "lsblk stub: $*" >&2; exit 64 ;;
esac
`,
		"findmnt": `#!/bin/sh
case "$*" in
"-no SOURCE /") echo ` + d + `/boot3 ;;
*) exit 1 ;;
esac
`,
		"blkid": `#!/bin/sh
case "$1" in
-L) [ "$2" = SITEBOOT ] && [ -n "` + configDev + `" ] && echo "` + configDev + `"; exit 0 ;;
-p) exit $(cat "$2.blkid") ;;
esac
exit 64
`,
		// What would change the host running the test fails it instead.
		"hostname":  "#!/bin/sh\necho hostname stub called >&2; exit 99\n",
		"mkfs.ext4": "#!/bin/sh\necho mkfs.ext4 stub called >&2; exit 99\n",
		"udevadm":   "#!/bin/sh\nexit 99\n",
		"mount":     "#!/bin/sh\nexit 0\n",
		"umount":    "#!/bin/sh\nexit 0\n",
		"usermod":   "#!/bin/sh\necho \"$*\" >>" + filepath.Join(dir, "usermod.log") + "\n",
		// install as root with -o root -g siteboot needs a siteboot group;
		// the stub drops the owner and group and installs the rest.
		"install": `#!/bin/sh
n=$#
while [ $n -gt 0 ]; do
	a=$1; shift; n=$((n - 1))
	case $a in
	-o | -g) shift; n=$((n - 1)) ;;
	*) set -- "$@" "$a" ;;
	esac
done
exec /usr/bin/install "$@"
`,
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(bin, name), []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
}

// runSetup sources the script and runs shell code after it.
func runSetup(t *testing.T, dir, code string) (string, error) {
	t.Helper()
	script, err := filepath.Abs(setupScript)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("sh", "-c", `set -eu; . "$SCRIPT"
mnt=$T/drive etc=$T/etc netdir=$T/run/network timesyncd=$T/run/timesyncd
hostname_file=$T/hostname kernel_hostname=$T/kernel-hostname
`+code)
	cmd.Env = append(os.Environ(), "APPLIANCE_SETUP_FUNCTIONS_ONLY=1", "SCRIPT="+script, "T="+dir,
		"PATH="+filepath.Join(dir, "bin")+":"+os.Getenv("PATH"))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	return out.String(), err
}

func writeFile(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// disk makes a fake whole disk of 4 MiB under dir/disks: zeros, or with
// data in its middle (head) or last MiB (tail).
func disk(t *testing.T, dir, name, typ, ro, rm, tran, blkidRC, content string) {
	t.Helper()
	d := filepath.Join(dir, "disks", name)
	b := make([]byte, 4<<20)
	switch content {
	case "head":
		copy(b[4096:], "LUKS? no: another system's raw data")
	case "tail":
		copy(b[len(b)-4096:], "EFI PART")
	}
	writeFile(t, d, b)
	for ext, v := range map[string]string{"type": typ, "ro": ro, "rm": rm, "tran": tran, "blkid": blkidRC} {
		writeFile(t, d+"."+ext, []byte(v+"\n"))
	}
}

func TestApplianceSetupBlankDisks(t *testing.T) {
	dir := t.TempDir()
	stubs(t, dir, "boot", "")
	disk(t, dir, "boot", "disk", "0", "0", "virtio", "2", "")
	writeFile(t, filepath.Join(dir, "disks", "boot.parts"), []byte("boot\nboot1\nboot3\n"))
	disk(t, dir, "blank", "disk", "0", "0", "virtio", "2", "")
	disk(t, dir, "ext4", "disk", "0", "0", "virtio", "0", "")
	disk(t, dir, "unknown", "disk", "0", "0", "sata", "2", "head")
	disk(t, dir, "backupgpt", "disk", "0", "0", "sata", "2", "tail")
	disk(t, dir, "usbdisk", "disk", "0", "0", "usb", "2", "")
	disk(t, dir, "stick", "disk", "0", "1", "", "2", "")
	disk(t, dir, "readonly", "disk", "1", "0", "virtio", "2", "")
	disk(t, dir, "part", "part", "0", "0", "", "2", "")
	disk(t, dir, "parted", "disk", "0", "0", "virtio", "2", "")
	writeFile(t, filepath.Join(dir, "disks", "parted.parts"), []byte("parted\nparted1\n"))

	out, err := runSetup(t, dir, "blank_disks")
	if err != nil {
		t.Fatalf("blank_disks: %v\n%s", err, out)
	}
	want := filepath.Join(dir, "disks", "blank") + "\n"
	if out != want {
		t.Errorf("blank_disks printed\n%s\nwant only\n%s", out, want)
	}
}

// A drive that unlocked root on one boot must not leave it unlocked on a
// boot without the drive, or with a hash that is not one.
func TestApplianceSetupRootPassword(t *testing.T) {
	for _, tc := range []struct {
		name, hash string // hash "" with drive: no file; drive false: no drive
		drive      bool
		want       string
	}{
		{"no drive", "", false, "-p ! root"},
		{"no file", "", true, "-p ! root"},
		{"good", "$6$salt$abc./XYZ09\n", true, "-p $6$salt$abc./XYZ09 root"},
		{"crlf", "$6$salt$abc\r\n", true, "-p $6$salt$abc root"},
		{"not a hash", "hunter2\n", true, "-p ! root"},
		{"colon", "$6$x$y:0:0::::\n", true, "-p ! root"},
		{"dollar only", "$\n", true, "-p ! root"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			dev := ""
			if tc.drive {
				dev = "/dev/sr0"
			}
			stubs(t, dir, "boot", dev)
			writeFile(t, filepath.Join(dir, "etc", "siteboot.yaml"), []byte("old\n"))
			if err := os.MkdirAll(filepath.Join(dir, "drive"), 0o755); err != nil {
				t.Fatal(err)
			}
			if tc.hash != "" {
				writeFile(t, filepath.Join(dir, "drive", "root-password-hash"), []byte(tc.hash))
			}
			out, err := runSetup(t, dir, "apply_config")
			if err != nil {
				t.Fatalf("apply_config: %v\n%s", err, out)
			}
			log, _ := os.ReadFile(filepath.Join(dir, "usermod.log"))
			if got := strings.TrimSpace(string(log)); got != tc.want {
				t.Errorf("usermod calls %q, want %q\n%s", got, tc.want, out)
			}
		})
	}
}

// Symbolic links on the drive are ignored, directories as well as files: a
// link would copy a file of the image's own root.
func TestApplianceSetupIgnoresSymlinks(t *testing.T) {
	dir := t.TempDir()
	stubs(t, dir, "boot", "/dev/sr0")
	secret := filepath.Join(dir, "image-root-secret")
	writeFile(t, filepath.Join(secret, "shadow"), []byte("root:$6$the-image's$own\n"))
	drive := filepath.Join(dir, "drive")
	if err := os.MkdirAll(drive, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, l := range []string{"tls", "secrets", "network"} {
		if err := os.Symlink(secret, filepath.Join(drive, l)); err != nil {
			t.Fatal(err)
		}
	}
	for _, l := range []string{"siteboot.yaml", "timesyncd.conf", "hostname", "root-password-hash"} {
		if err := os.Symlink(filepath.Join(secret, "shadow"), filepath.Join(drive, l)); err != nil {
			t.Fatal(err)
		}
	}
	out, err := runSetup(t, dir, "apply_config")
	if err != nil {
		t.Fatalf("apply_config: %v\n%s", err, out)
	}
	for _, p := range []string{"etc/tls", "etc/secrets", "etc/siteboot.yaml", "run/network", "run/timesyncd", "hostname", "kernel-hostname"} {
		if _, err := os.Stat(filepath.Join(dir, p)); err == nil {
			t.Errorf("%s was made from a symbolic link on the drive\n%s", p, out)
		}
	}
	log, _ := os.ReadFile(filepath.Join(dir, "usermod.log"))
	if got := strings.TrimSpace(string(log)); got != "-p ! root" {
		t.Errorf("usermod calls %q, want root locked", got)
	}
}

// A host name the kernel would refuse (or hostname(1) take as an option)
// is reported and skipped; it does not stop the set-up.
func TestApplianceSetupHostname(t *testing.T) {
	for _, tc := range []struct{ file, want string }{
		{"boot-1.dc1\n", "boot-1.dc1"},
		{"boot-1\r\n", "boot-1"},
		{"-F\n", ""},
		{"a b\n", ""},
		{strings.Repeat("a", 64) + "\n", ""},
		{"ends-\n", ""},
		{"\n", ""},
	} {
		dir := t.TempDir()
		stubs(t, dir, "boot", "/dev/sr0")
		writeFile(t, filepath.Join(dir, "drive", "hostname"), []byte(tc.file))
		out, err := runSetup(t, dir, "apply_config")
		if err != nil {
			t.Errorf("hostname %q: apply_config: %v\n%s", tc.file, err, out)
			continue
		}
		got, _ := os.ReadFile(filepath.Join(dir, "kernel-hostname"))
		if strings.TrimSpace(string(got)) != tc.want {
			t.Errorf("hostname %q: set %q, want %q\n%s", tc.file, got, tc.want, out)
		}
	}
}

// Files in tls/ with odd names (spaces, a newline, a leading dash) are
// copied as they are and counted right; a directory in tls/ is skipped.
func TestApplianceSetupOddNames(t *testing.T) {
	dir := t.TempDir()
	stubs(t, dir, "boot", "/dev/sr0")
	names := []string{"cert pem", "-key.pem", "new\nline"}
	for _, n := range names {
		writeFile(t, filepath.Join(dir, "drive", "tls", n), []byte(n))
	}
	if err := os.MkdirAll(filepath.Join(dir, "drive", "tls", "subdir"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "etc", "tls", "stale.pem"), []byte("old"))
	out, err := runSetup(t, dir, "apply_config")
	if err != nil {
		t.Fatalf("apply_config: %v\n%s", err, out)
	}
	ents, err := os.ReadDir(filepath.Join(dir, "etc", "tls"))
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != len(names) {
		t.Errorf("etc/tls holds %d entries, want %d: %v", len(ents), len(names), ents)
	}
	if !strings.Contains(out, "tls/ applied (3 files)") {
		t.Errorf("output does not say 3 files:\n%s", out)
	}
}

// mount_data formats nothing when it cannot tell which blank disk is
// meant, and stops (siteboot with it) on a data disk e2fsck cannot repair,
// saying what e2fsck said.
func TestApplianceSetupMountData(t *testing.T) {
	for _, tc := range []struct {
		name, label, e2fsckRC string
		blanks                int
		wantErr               bool
		want                  string
	}{
		// The mkfs.ext4 stub fails, so formatting shows as an error.
		{"one blank disk", "", "0", 1, true, "formatting the blank disk " + "DIR/disks/blanka"},
		{"two blank disks", "", "0", 2, false, "2 blank disks"},
		{"no disk", "", "0", 0, false, "WARNING: no data disk"},
		{"labelled, clean", "/dev/vdz", "0", 0, false, "data disk /dev/vdz mounted"},
		{"labelled, repaired", "/dev/vdz", "1", 0, false, "data disk /dev/vdz mounted"},
		{"labelled, broken", "/dev/vdz", "4", 0, true, "e2fsck: /dev/vdz: UNEXPECTED INCONSISTENCY"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			stubs(t, dir, "boot", "")
			disk(t, dir, "boot", "disk", "0", "0", "virtio", "2", "")
			writeFile(t, filepath.Join(dir, "disks", "boot.parts"), []byte("boot\nboot1\n"))
			for i := 0; i < tc.blanks; i++ {
				disk(t, dir, "blank"+string(rune('a'+i)), "disk", "0", "0", "virtio", "2", "")
			}
			bin := filepath.Join(dir, "bin")
			for name, body := range map[string]string{
				"blkid":   "#!/bin/sh\ncase \"$1\" in -L) [ \"$2\" = siteboot-data ] && [ -n \"" + tc.label + "\" ] && echo " + tc.label + "; exit 0 ;; -p) exit $(cat \"$2.blkid\") ;; esac\nexit 64\n",
				"findmnt": "#!/bin/sh\ncase \"$*\" in \"-no SOURCE /\") echo " + filepath.Join(dir, "disks", "boot3") + " ;; *) exit 1 ;; esac\n",
				"e2fsck":  "#!/bin/sh\n[ " + tc.e2fsckRC + " -lt 4 ] || echo \"$2: UNEXPECTED INCONSISTENCY; RUN fsck MANUALLY.\"\nexit " + tc.e2fsckRC + "\n",
				"chown":   "#!/bin/sh\n",
				"df":      "#!/bin/sh\necho Size; echo 100G\n",
			} {
				writeFile(t, filepath.Join(bin, name), []byte(body))
				if err := os.Chmod(filepath.Join(bin, name), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			out, err := runSetup(t, dir, "state=$T/state; mount_data")
			tc.want = strings.ReplaceAll(tc.want, "DIR", dir)
			if (err != nil) != tc.wantErr || !strings.Contains(out, tc.want) {
				t.Errorf("mount_data: err %v (want error: %v), output\n%s\nwant it to hold %q", err, tc.wantErr, out, tc.want)
			}
			if tc.blanks != 1 && strings.Contains(out, "mkfs.ext4 stub called") {
				t.Errorf("mount_data formatted a disk:\n%s", out)
			}
		})
	}
}

// A .network file that sorts after the image's DHCP default is applied
// but never matches first; the set-up says so.
func TestApplianceSetupNetworkOrder(t *testing.T) {
	dir := t.TempDir()
	stubs(t, dir, "boot", "/dev/sr0")
	writeFile(t, filepath.Join(dir, "drive", "network", "10-prov.network"), []byte("[Match]\n"))
	writeFile(t, filepath.Join(dir, "drive", "network", "provisioning.network"), []byte("[Match]\n"))
	out, err := runSetup(t, dir, "apply_config")
	if err != nil {
		t.Fatalf("apply_config: %v\n%s", err, out)
	}
	if !strings.Contains(out, "WARNING: network/provisioning.network sorts after") || strings.Contains(out, "network/10-prov.network sorts") {
		t.Errorf("want a warning for provisioning.network alone:\n%s", out)
	}
	if !strings.Contains(out, "network: 2 systemd-networkd files applied") {
		t.Errorf("want both files applied:\n%s", out)
	}
}

// A file too large to be what the drive should hold stops the set-up and
// leaves the previous siteboot.yaml whole.
func TestApplianceSetupHugeFile(t *testing.T) {
	dir := t.TempDir()
	stubs(t, dir, "boot", "/dev/sr0")
	writeFile(t, filepath.Join(dir, "etc", "siteboot.yaml"), []byte("old\n"))
	writeFile(t, filepath.Join(dir, "drive", "siteboot.yaml"), make([]byte, 2<<20))
	out, err := runSetup(t, dir, "apply_config")
	if err == nil || !strings.Contains(out, "ERROR: siteboot.yaml on the config drive is 2097152 bytes") {
		t.Errorf("apply_config of a 2 MiB siteboot.yaml: err %v, output\n%s", err, out)
	}
	if got, _ := os.ReadFile(filepath.Join(dir, "etc", "siteboot.yaml")); string(got) != "old\n" {
		t.Errorf("siteboot.yaml is now %d bytes, want the old one kept", len(got))
	}
}
