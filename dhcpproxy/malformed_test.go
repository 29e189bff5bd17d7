package dhcpproxy

import (
	"bytes"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/insomniacslk/dhcp/dhcpv4"
)

// headerLen is the fixed BOOTP header plus the magic cookie.
const headerLen = 240

// withRawOptions returns a valid known-MAC DISCOVER header followed by the
// given raw option bytes.
func withRawOptions(t *testing.T, opts ...byte) []byte {
	t.Helper()
	pkt := buildReq(t, macPlain, dhcpv4.MessageTypeDiscover)
	return append(append([]byte(nil), pkt[:headerLen]...), opts...)
}

func TestHandleMalformed(t *testing.T) {
	valid := pxeReq(t, macPlain, dhcpv4.MessageTypeDiscover, 7)
	pxe := append([]byte{60, 9}, "PXEClient"...)
	discover := []byte{53, 1, 1}
	arch7 := []byte{93, 2, 0, 7}
	cat := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	badCookie := append([]byte(nil), valid...)
	badCookie[236] = 0
	hlen255 := append([]byte(nil), valid...)
	hlen255[2] = 255
	tests := []struct {
		name string
		pkt  []byte
		want string
	}{
		{"empty", nil, "ignored:malformed"},
		{"one byte", []byte{1}, "ignored:malformed"},
		{"truncated header", valid[:239], "ignored:malformed"},
		{"header without any options", valid[:headerLen], "ignored:not-pxe"},
		{"bad magic cookie", badCookie, "ignored:malformed"},
		{"option longer than the packet", withRawOptions(t, 60, 200, 'P', 'X', 'E'), "ignored:malformed"},
		{"options without end", withRawOptions(t, cat(discover, pxe, arch7)...), "ignored:malformed"},
		{"option code without length", withRawOptions(t, 53), "ignored:malformed"},
		{"hardware length 255", hlen255, "ignored:not-ethernet"},
		{"valid with a kilobyte of padding", append(append([]byte(nil), valid...), make([]byte, 1024)...), "offer"},
		{"vendor class of 255 bytes starting PXEClient",
			withRawOptions(t, cat(discover, []byte{60, 255}, []byte("PXEClient"), bytes.Repeat([]byte{'x'}, 246), arch7, []byte{255})...), "offer"},
		{"vendor class split over two options (RFC 3396)",
			withRawOptions(t, cat(discover, []byte{60, 3}, []byte("PXE"), []byte{60, 6}, []byte("Client"), arch7, []byte{255})...), "offer"},
		{"option 93 repeated: the first code counts",
			withRawOptions(t, cat(discover, pxe, arch7, []byte{93, 2, 0, 0}, []byte{255})...), "offer"},
		{"option 93 empty", withRawOptions(t, cat(discover, pxe, []byte{93, 0, 255})...), "ignored:unknown-arch"},
		{"message type of two bytes", withRawOptions(t, cat([]byte{53, 2, 1, 1}, pxe, arch7, []byte{255})...), "ignored:message-type"},
		{"255 bytes of junk user class", withRawOptions(t, cat(discover, pxe, arch7, []byte{77, 255}, bytes.Repeat([]byte{0xff}, 255), []byte{255})...), "offer"},
		{"RFC 3004 user class with a zero-length entry", withRawOptions(t, cat(discover, pxe, arch7, []byte{77, 3, 0, 1, 'x', 255})...), "offer"},
		{"option 97 of 255 bytes", withRawOptions(t, cat(discover, pxe, arch7, []byte{97, 255}, make([]byte, 255), []byte{255})...), "offer"},
		{"only pads then end", withRawOptions(t, 0, 0, 0, 255), "ignored:not-pxe"},
		{"64 options", withRawOptions(t, cat(discover, pxe, arch7, bytes.Repeat([]byte{200, 0}, maxOptions-3), []byte{255})...), "offer"},
		{"65 options", withRawOptions(t, cat(discover, pxe, arch7, bytes.Repeat([]byte{200, 0}, maxOptions-2), []byte{255})...), "ignored:too-many-options"},
		{"65 options between pads", withRawOptions(t, cat(discover, pxe, arch7, bytes.Repeat([]byte{0, 200, 1, 'x'}, maxOptions-2), []byte{255})...), "ignored:too-many-options"},
		{"256 pads before the end", withRawOptions(t, cat(discover, pxe, arch7, make([]byte, maxPads), []byte{255})...), "offer"},
		{"257 pads before the end", withRawOptions(t, cat(discover, pxe, arch7, make([]byte, maxPads+1), []byte{255})...), "ignored:too-many-options"},
		{"options of 255 bytes to the end of a frame", withRawOptions(t, cat(discover, pxe, arch7, bytes.Repeat(cat([]byte{250, 255}, make([]byte, 255)), 4), []byte{255})...), "offer"},
		{"options of 255 bytes past the end of a frame", withRawOptions(t, cat(discover, pxe, arch7, bytes.Repeat(cat([]byte{250, 255}, make([]byte, 255)), 5), []byte{255})...), "ignored:too-many-options"},
		{"a datagram of one-byte options", withRawOptions(t, cat(discover, pxe, arch7, bytes.Repeat([]byte{77, 1, 'x'}, 2900), []byte{255})...), "ignored:too-many-options"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, nil)
			d := f.srv.decide(tt.pkt, arrive67)
			if diff := cmp.Diff(tt.want, d.label()); diff != "" {
				t.Errorf("decision (-want +got):\n%s", diff)
			}
			if got := f.rec.sightings(); len(got) != 0 {
				t.Errorf("sightings = %v, want none", got)
			}
			if (d.reply != nil) != (tt.want == "offer") {
				t.Errorf("reply present = %v for decision %q", d.reply != nil, d.label())
			}
		})
	}
}

// TestHandleMalformedReplyShape checks that the absurd-but-answered cases
// still produce the normal reply: the client's junk is not echoed.
func TestHandleMalformedReplyShape(t *testing.T) {
	f := newFixture(t, nil)
	pkt := withRawOptions(t, bytes.Join([][]byte{{53, 1, 1}, {60, 255}, []byte("PXEClient"),
		bytes.Repeat([]byte{'x'}, 246), {93, 2, 0, 7}, {97, 255}, make([]byte, 255), {255}}, nil)...)
	reply, to, ok := f.srv.Handle(pkt, arrive67)
	if !ok {
		t.Fatal("no reply")
	}
	got := summarize(t, reply, to)
	if diff := cmp.Diff(*offer("ipxe.efi"), got); diff != "" {
		t.Errorf("reply (-want +got):\n%s", diff)
	}
}
