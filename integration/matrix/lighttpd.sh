#!/bin/bash
# matrix/lighttpd: lighttpd (one process, one event loop; CGI children on
# pipes) and python3-requests (urllib3: a keep-alive pool that polls a
# pooled connection for a hang-up before reusing it). One Session: GET 20
# files of 1 B to 1 MB (seeded), Range and HEAD requests, streamed
# downloads, and POSTs of 4 bodies up to 2 MB to a CGI script that answers
# with the body's MD5. Result: every status, length and MD5 (equal to the
# files' and bodies'), the number of connections the pool opened.
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
need_cmd lighttpd
"$PY3" -c 'import requests' 2>/dev/null || skip "python3-requests is not installed"
MX_SWITCHED_BY="client lighttpd"

mx_seeded_files "$WORK/www" h 83 20 1000000 1 1000 65536 300000 1000000
cat >"$WORK/www/md5.sh" <<'CGI'
#!/bin/sh
printf 'Content-Type: text/plain\r\n\r\n'
md5sum | cut -c1-32
CGI

CLIENT='
import hashlib, random, sys, requests
from urllib3.connectionpool import HTTPConnectionPool
port, www = int(sys.argv[1]), sys.argv[2]
base = "http://127.0.0.1:%d/" % port
opened = []
orig = HTTPConnectionPool._new_conn
def counted(self):
    opened.append(1)
    return orig(self)
HTTPConnectionPool._new_conn = counted
s = requests.Session()
for i in range(1, 21):
    name = "h%02d.bin" % i
    want = open("%s/%s" % (www, name), "rb").read()
    r = s.get(base + name, timeout=30)
    print(name, r.status_code, len(r.content), hashlib.md5(r.content).hexdigest(), r.content == want)
    if len(want) > 10:
        r = s.get(base + name, headers={"Range": "bytes=3-%d" % (len(want) // 2)}, timeout=30)
        print("  range", r.status_code, r.content == want[3:len(want) // 2 + 1])
    r = s.head(base + name, timeout=30)
    print("  head", r.status_code, r.headers.get("Content-Length"))
    with s.get(base + name, stream=True, timeout=30) as r:
        h = hashlib.md5()
        for chunk in r.iter_content(8192):
            h.update(chunk)
        print("  streamed", r.status_code, h.hexdigest() == hashlib.md5(want).hexdigest())
rng = random.Random(84)
for n in (1, 5000, 700000, 2000000):
    body = rng.randbytes(n)
    r = s.post(base + "md5.sh", data=body, timeout=30)
    print("post", n, r.status_code, r.text.strip() == hashlib.md5(body).hexdigest())
print("connections opened by the pool:", len(opened))
'

mx_body() {
  local port pid dir
  port=$(free_port)
  mx_port lighttpd "$port"
  dir=$WORK/$MODE-lighttpd
  mkdir -p "$dir"
  cat >"$dir/lighttpd.conf" <<CONF
server.modules = ("mod_cgi")
server.document-root = "$WORK/www"
server.bind = "127.0.0.1"
server.port = $port
server.errorlog = "$dir/error.log"
server.max-keep-alive-requests = 1000
cgi.assign = (".sh" => "/bin/sh")
CONF
  mx_bg lighttpd lighttpd -D -f "$dir/lighttpd.conf"
  pid=$BG_PID
  mx_wait_listen "$port" || { stop_bg "$pid"; cat "$dir/error.log"; return; }
  mx_client client "$PY3" -c "$CLIENT" "$port" "$WORK/www"
  mx_check "20 files fetched exact" test "$(grep -c '^h[0-9]*\.bin 200 .* True$' "$MX_OUT")" -eq 20
  mx_check "20 streamed downloads exact" test "$(grep -c '^  streamed 200 True$' "$MX_OUT")" -eq 20
  mx_check "4 POST bodies hashed right by the CGI" test "$(grep -c '^post .* 200 True$' "$MX_OUT")" -eq 4
  mx_check "no 'False' in the client's report (ranges included)" test "$(grep -c 'False' "$MX_OUT")" -eq 0
  mx_check "lighttpd still running" kill -0 "$pid"
  stop_bg "$pid"
}

mx_main
