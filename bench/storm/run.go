package main

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"time"

	"github.com/siteboot/siteboot/bench/internal/proc"
	"github.com/siteboot/siteboot/bench/internal/pxe"
)

// machines builds the run's machines from the flags.
func (o options) machines() ([]machine, error) {
	macs, err := pxe.GenerateMACs(o.MACPrefix, o.N)
	if err != nil {
		return nil, err
	}
	srcs, err := parseSrcIPs(o.SrcIPs)
	if err != nil {
		return nil, err
	}
	out := make([]machine, o.N)
	for i := range out {
		// BIOS for a -bios fraction, interleaved: index i is BIOS when the
		// running count of BIOS machines steps up at i.
		bios := int(float64(i+1)*o.BIOS) > int(float64(i)*o.BIOS)
		var src netip.Addr
		if len(srcs) > 0 {
			src = srcs[i%len(srcs)]
		}
		out[i] = newMachine(i, macs[i], bios, o.UEFIHTTP, o.Seed, src)
	}
	return out, nil
}

func (o options) bootSpec() bootSpec {
	pxeT, _ := parseTimeouts(o.PXETimeouts, o.TimeScale)
	ipxeT, _ := parseTimeouts(o.IPXETimeouts, o.TimeScale)
	pxeReqT, _ := parseTimeouts(o.PXEReqTimeouts, o.TimeScale)
	ipxeReqT, _ := parseTimeouts(o.IPXEReqTimeouts, o.TimeScale)
	ipxeBST, _ := parseTimeouts(o.IPXEBSTimeouts, o.TimeScale)
	return bootSpec{
		PXETimeouts: pxeT, IPXETimeouts: ipxeT, PXEReqTimeouts: pxeReqT, IPXEReqTimeouts: ipxeReqT, IPXEBSTimeouts: ipxeBST,
		PXEPort: o.PXEPort,
		TFTP: tftpSpec{Port: o.TFTPPort, BlkSize: o.BlkSize, Tries: o.TFTPTries, Probe: o.TFTPProbe, WindowSize: o.UEFIWindow,
			Timeout: time.Duration(float64(o.TFTPTimeout) * o.TimeScale)},
		HTTP: httpSpec{RcvBuf: o.RcvBuf, IdleTimeout: o.HTTPIdle, MaxScript: maxScriptBytes,
			CopyBodies: o.copyBodies()},
		KernelSHA256: o.KernelSHA256, InitrdSHA256: o.InitrdSHA256,
	}
}

// runStorm boots every machine through conn, the shared DHCP socket, and
// pxeConn, the shared 4011 socket (nil: none), and returns the summary.
// It closes nothing it did not open; every socket a machine opens is
// closed before it returns.
func runStorm(ctx context.Context, o options, conn, pxeConn net.PacketConn) (Result, error) {
	ms, err := o.machines()
	if err != nil {
		return Result{}, err
	}
	target, err := net.ResolveUDPAddr("udp4", o.DHCPServer)
	if err != nil {
		return Result{}, fmt.Errorf("-dhcp-server: %w", err)
	}
	ctx, cancel := context.WithTimeoutCause(ctx, o.Timeout, errRunTimeout)
	defer cancel()
	mux := newDHCPMux(conn, pxeConn, target)
	defer mux.close()

	var seed [4]byte
	_, _ = rand.Read(seed[:])
	xidBase := binary.BigEndian.Uint32(seed[:])
	spec := o.bootSpec()
	results := make([]MachineResult, len(ms))
	limit := o.Concurrency
	if limit == 0 {
		limit = len(ms)
	}
	slots := make(chan struct{}, limit)
	var bulk *bulkWorker
	if !o.BulkInline {
		if bulk, err = startBulkWorker(o.workerArgs(), o.BulkNice); err != nil {
			return Result{}, err
		}
	}
	cpu0, start := proc.CPU(), time.Now()
	var wg sync.WaitGroup
	for i, m := range ms {
		res := &results[i]
		*res = MachineResult{Index: i, MAC: m.MAC.String(), UUID: m.uuidString(), Kind: m.kind(), Steps: map[string]float64{}}
		if m.Src.IsValid() {
			res.Src = m.Src.String()
		}
		due := start
		if len(ms) > 1 {
			due = start.Add(time.Duration(int64(o.Window) * int64(i) / int64(len(ms)-1)))
		}
		if !sleepUntil(ctx, due) || !acquire(ctx, slots) {
			res.FailedStep, res.Reason, res.Error = stepPXEDHCP, classify(context.Cause(ctx)), "not started: "+context.Cause(ctx).Error()
			continue
		}
		buf := make([]byte, 32<<10)
		b := &booter{spec: spec, mux: mux, m: m, xid: xidBase + 2*uint32(i), res: res,
			client: newMachineClient(m.Src, spec.HTTP, buf), buf: buf, bulk: bulk}
		wg.Go(func() {
			defer func() { <-slots }()
			t0 := time.Now()
			res.StartS = t0.Sub(start).Seconds()
			mctx, mcancel := context.WithTimeoutCause(ctx, o.MachineTimeout, errMachineTimeout)
			b.run(mctx)
			if !res.Done && mctx.Err() != nil {
				// The step saw only "context deadline exceeded": name whose
				// deadline it was, the machine's or the run's.
				res.Reason = classify(context.Cause(mctx))
			}
			mcancel()
			res.TotalS = time.Since(t0).Seconds()
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	res := summarize(o, results, mux.stats(), elapsed)
	res.ClientCPUS = (proc.CPU() - cpu0).Seconds()
	if bulk != nil {
		res.ClientCPUS += bulk.close().Seconds()
	}
	return res, nil
}

// copyBodies: whether the machines copy body bytes out of their sockets:
// when asked to, and always when a digest is checked, which needs them.
func (o options) copyBodies() bool {
	return o.CopyBodies || o.KernelSHA256 != "" || o.InitrdSHA256 != ""
}

// workerArgs are the flags the bulk worker needs: how machines talk HTTP
// and what the files must hash to.
func (o options) workerArgs() []string {
	return []string{"-rcvbuf", strconv.Itoa(o.RcvBuf), "-http-idle", o.HTTPIdle.String(), "-copy-bodies=" + strconv.FormatBool(o.CopyBodies),
		"-kernel-sha256", o.KernelSHA256, "-initrd-sha256", o.InitrdSHA256}
}

func acquire(ctx context.Context, slots chan struct{}) bool {
	select {
	case slots <- struct{}{}:
		return true
	case <-ctx.Done():
		return false
	}
}

func sleepUntil(ctx context.Context, t time.Time) bool {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err() == nil
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-ctx.Done():
		return false
	}
}
