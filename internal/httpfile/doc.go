// Package httpfile is the one way the appliance answers a GET or HEAD of a
// file it serves (the boot files under /boot/, the image cache's blobs
// under /cache/): RFC 9110 conditional requests (section 13: If-Match,
// If-None-Match, If-Range against a strong ETag) and byte ranges (section
// 14) under one range policy, then the body handed to the response writer's
// io.ReaderFrom so that net/http sends it with sendfile.
//
// The range policy: a Range header with exactly one range is honoured (206,
// or 416 when it starts past the end); anything else, several ranges
// included, is ignored and the whole file goes out with 200, as section
// 14.2 allows. No multipart/byteranges answer is ever built, so a request
// cannot make the reply larger than the file or cost more than one
// sendfile, however many ranges it lists. iPXE, curl and the provisioning
// ramdisks ask one range per request.
package httpfile
