package main

import (
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"
)

// writeJSON prints the result as one indented JSON object.
func writeJSON(w io.Writer, res Result) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(res); err != nil {
		return fmt.Errorf("write json: %w", err)
	}
	return nil
}

// writeTable prints the result for people.
func writeTable(w io.Writer, res Result) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	load := fmt.Sprintf("closed-loop, %d outstanding", res.Outstanding)
	if res.Mode == "open" {
		load = fmt.Sprintf("open-loop, %.0f req/s", res.Rate)
	}
	if res.Label != "" {
		fmt.Fprintf(tw, "run\t%s\n", res.Label)
	}
	fmt.Fprintf(tw, "load\t%s, %d MACs, to %s\n", load, res.MACs, res.Target)
	fmt.Fprintf(tw, "elapsed\t%.3f s\n", res.ElapsedS)
	fmt.Fprintf(tw, "sent\t%d\n", res.Sent)
	fmt.Fprintf(tw, "proxy offers\t%d (%.0f/s)\n", res.Offers, res.OffersPerSec)
	fmt.Fprintf(tw, "lost\t%d (%.2f%%)\n", res.Lost, res.LossPct)
	l := res.Latency
	fmt.Fprintf(tw, "latency ms\tp50 %.3f  p90 %.3f  p99 %.3f  max %.3f  mean %.3f\n", l.P50, l.P90, l.P99, l.Max, l.Mean)
	if s := res.ScheduleLag; s != nil {
		fmt.Fprintf(tw, "send lag ms\tp50 %.3f  p99 %.3f  max %.3f\n", s.P50, s.P99, s.Max)
	}
	fmt.Fprintf(tw, "unmatched\t%d (late or duplicate)\n", res.Unmatched)
	if res.Foreign > 0 {
		fmt.Fprintf(tw, "foreign\t%d (replies to xids this run did not send; in no server's count)\n", res.Foreign)
	}
	if res.WrongMAC+res.Malformed > 0 {
		fmt.Fprintf(tw, "bad replies\t%d wrong chaddr, %d malformed\n", res.WrongMAC, res.Malformed)
	}
	fmt.Fprintf(tw, "\nserver\treplies\tproxy offers\tplain offers\n")
	for _, s := range res.Servers {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\n", s.Server, s.Replies, s.ProxyOffers, s.PlainOffers)
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("write table: %w", err)
	}
	return nil
}
