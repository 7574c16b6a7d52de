#!/bin/bash
# matrix/apache_worker: Apache httpd with mpm_worker (a parent forks children,
# each a thread pool; a worker thread holds a keep-alive connection
# between requests (blocking reads with a poll timeout)), standalone from its own
# configuration (matrix/apache.inc), loaded by ab (ApacheBench: one poll
# loop, non-blocking sockets) with keep-alive: ab -k -n 20000 -c 20, once
# on a 6-byte file and once on a 64 KiB one. Both under the shim. Result:
# per ab run its exit status, "Complete requests" (20000), "Failed
# requests" (0) and "Non-2xx responses" (0); and no line of apache2's error
# log with "unexpected state", an error or a child that exited.
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
need_cmd ab
. "$(dirname "${BASH_SOURCE[0]}")/apache.inc"
apache_ab_entry worker
