#!/bin/bash
# matrix/haproxy_http: haproxy in HTTP mode (it parses each request and answer,
# keep-alive on both legs) with `option splice-auto` (bodies moved
# with splice(2) between its two sockets) in front of nginx
# (matrix/haproxy.inc). curl fetches 8 seeded files of 1 B to 4 MiB over one
# keep-alive connection, then wrk (2 threads, 20 connections, 5 s) loads a
# 64 KiB file. curl, wrk, haproxy and nginx all run under the shim; both
# haproxy's port and nginx's are whitelisted. Result: curl's exit status
# and HTTP codes, each file's MD5 (equal to the served file's), wrk's exit
# status, socket error counts (connect/read/write/timeout) and non-2xx count.
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
. "$(dirname "${BASH_SOURCE[0]}")/haproxy.inc"
haproxy_entry http
