#!/bin/bash
# matrix/apache_event: Apache httpd with mpm_event (a parent forks children,
# each a thread pool; keep-alive connections wait in a listener
# thread's epoll between requests and go back to a worker when readable), standalone from its own
# configuration (matrix/apache.inc), loaded by ab (ApacheBench: one poll
# loop, non-blocking sockets) with keep-alive: ab -k -n 20000 -c 20, once
# on a 6-byte file and once on a 64 KiB one. Both under the shim. Result:
# per ab run its exit status, "Complete requests" (20000), "Failed
# requests" (0) and "Non-2xx responses" (0); and no line of apache2's error
# log with "unexpected state", an error or a child that exited.
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
need_cmd ab
. "$(dirname "${BASH_SOURCE[0]}")/apache.inc"
apache_ab_entry event
