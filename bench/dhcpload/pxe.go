package main

import "github.com/siteboot/siteboot/bench/internal/pxe"

// The DISCOVER builder, reply parser, socket options and MAC lists are
// shared with bench/storm in bench/internal/pxe; these names keep this
// command's code and tests reading as before.
type (
	discoverSpec = pxe.DiscoverSpec
	reply        = pxe.Reply
)

const (
	msgOffer = pxe.MsgOffer
	maxMACs  = pxe.MaxMACs
)

var (
	buildDiscover = pxe.BuildDiscover
	setXID        = pxe.SetXID
	parseReply    = pxe.ParseReply
	generateMACs  = pxe.GenerateMACs
	parseMACs     = pxe.ParseMACs
	listenConfig  = pxe.ListenConfig
	openSocket    = pxe.OpenSocket
)
