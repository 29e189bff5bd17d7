package main

import (
	"net"
	"sort"
	"time"
)

// receiverStats is what the receiver goroutine counts.
type receiverStats struct {
	answered   uint64 // first proxy offer for a pending request
	unmatched  uint64 // proxy offers for an xid of this run no longer pending: late or duplicate
	foreign    uint64 // replies to an xid this run did not send (in no server's count)
	wrongMAC   uint64 // proxy offers whose chaddr is not the request's MAC
	malformed  uint64
	readErrors uint64
	lastAnswer time.Time
	hist       histogram
	servers    map[string]*ServerStat
}

func newReceiverStats() receiverStats {
	return receiverStats{servers: make(map[string]*ServerStat)}
}

// The per-server table holds the first maxServers servers to answer; any
// later one is counted under otherServers. A stranger on the LAN sees the
// broadcast xids and could otherwise add a row per forged option 54.
const (
	maxServers   = 64
	otherServers = "other"
)

// account counts a reply under its server (option 54, else the source
// address) and reports whether it is a proxy offer.
func (s *receiverStats) account(rep reply, from net.Addr) bool {
	id := from.String()
	if rep.ServerID.IsValid() {
		id = rep.ServerID.String()
	}
	st := s.servers[id]
	if st == nil && len(s.servers) >= maxServers {
		id = otherServers
		st = s.servers[id]
	}
	if st == nil {
		st = &ServerStat{Server: id}
		s.servers[id] = st
	}
	st.Replies++
	switch {
	case rep.IsProxyOffer():
		st.ProxyOffers++
		return true
	case rep.MsgType == msgOffer:
		st.PlainOffers++
	}
	return false
}

// ServerStat counts one server's replies.
type ServerStat struct {
	Server      string `json:"server"`
	Replies     uint64 `json:"replies"`
	ProxyOffers uint64 `json:"proxy_offers"`
	PlainOffers uint64 `json:"plain_offers"`
}

// Latency summarises answered requests, in milliseconds.
type Latency struct {
	P50  float64 `json:"p50_ms"`
	P90  float64 `json:"p90_ms"`
	P99  float64 `json:"p99_ms"`
	Max  float64 `json:"max_ms"`
	Mean float64 `json:"mean_ms"`
}

// Result is one run's report.
type Result struct {
	Label        string       `json:"label,omitempty"`
	Mode         string       `json:"mode"`
	Rate         float64      `json:"rate,omitempty"`
	Outstanding  int          `json:"outstanding,omitempty"`
	MACs         int          `json:"macs"`
	Target       string       `json:"target"`
	ElapsedS     float64      `json:"elapsed_s"`
	Sent         uint64       `json:"sent"`
	Offers       uint64       `json:"offers"`
	Lost         uint64       `json:"lost"`
	LossPct      float64      `json:"loss_pct"`
	OffersPerSec float64      `json:"offers_per_s"`
	Latency      Latency      `json:"latency"`
	ScheduleLag  *Latency     `json:"schedule_lag,omitempty"`
	Unmatched    uint64       `json:"unmatched"`
	Foreign      uint64       `json:"foreign"`
	WrongMAC     uint64       `json:"wrong_mac"`
	Malformed    uint64       `json:"malformed"`
	Servers      []ServerStat `json:"servers"`
}

func (r *runner) result() Result {
	sent := r.sentBound()
	rec := &r.recv
	elapsed := time.Duration(r.lastSend.Load())
	if !rec.lastAnswer.IsZero() {
		elapsed = max(elapsed, rec.lastAnswer.Sub(r.start))
	}
	res := Result{
		Mode: "closed", Outstanding: r.spec.Outstanding, MACs: len(r.pkts),
		Target: r.spec.Target.String(), ElapsedS: elapsed.Seconds(),
		Sent: sent, Offers: rec.answered, Lost: r.lost.Load(),
		Latency: summarize(&rec.hist), Unmatched: rec.unmatched, Foreign: rec.foreign,
		WrongMAC: rec.wrongMAC, Malformed: rec.malformed, Servers: sortedServers(rec.servers),
	}
	if r.spec.Rate > 0 {
		lag := summarize(&r.lag)
		res.Mode, res.Rate, res.Outstanding, res.ScheduleLag = "open", r.spec.Rate, 0, &lag
	}
	if sent > 0 {
		res.LossPct = 100 * float64(res.Lost) / float64(sent)
	}
	if elapsed > 0 {
		res.OffersPerSec = float64(res.Offers) / elapsed.Seconds()
	}
	return res
}

func summarize(h *histogram) Latency {
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	return Latency{
		P50: ms(h.percentile(50)), P90: ms(h.percentile(90)), P99: ms(h.percentile(99)),
		Max: ms(h.max), Mean: ms(h.mean()),
	}
}

func sortedServers(m map[string]*ServerStat) []ServerStat {
	out := make([]ServerStat, 0, len(m))
	for _, s := range m {
		out = append(out, *s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Server < out[j].Server })
	return out
}
