// Command rangeload is siteboot's HTTP range-read load generator: K
// concurrent keep-alive clients fetch random, aligned byte ranges (1 MiB by
// default) of one URL for a fixed duration, the way many iPXE sanboot
// clients and ramdisks read a cached image.
//
// Every answer must be exactly what RFC 9110 section 14 asks of a single
// range: 206 Partial Content, a Content-Range "bytes first-last/size" that
// names the range requested and the size the HEAD reported, and exactly
// that many body bytes. With -verify FILE, one answer in -verify-every is
// compared byte for byte with the same range of FILE. Anything else is an
// error; the run reports errors and exits non-zero.
//
// It reports MB/s (10^6 bytes of body per second), requests/s and latency
// percentiles (request sent to last body byte read), as a table or JSON.
// Duration, client count and range size are capped; point it only at
// servers on loopback or in a network namespace the benchmark created.
package main
