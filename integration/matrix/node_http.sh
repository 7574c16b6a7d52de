#!/bin/bash
# matrix/node_http: Node.js's http module at both ends (libuv: one epoll
# loop, non-blocking sockets, writes with writev). The server answers GET
# /blob/N with a seeded body of 1 B to 512 KiB (built at start) and POST
# /echo with the SHA-256 of the body it read. The client (an http.Agent
# with keepAlive, at most 64 sockets) keeps 64 requests in flight until
# 3000 are done: two of three GETs (each body's SHA-256 compared with the
# one the client computes for N), one of three POSTs of up to 256 KiB.
# Then wrk (2 threads, 32 keep-alive connections, 4 s) loads /blob/7.
# Both under the shim. Result: the client's exit status, the number of
# answers right (3000), wrong and failed, the number of sockets the agent
# opened (64: keep-alive reuses them), a SHA-256 over every answer in
# request order, and wrk's error counts.
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
need_cmd node wrk
MX_SWITCHED_BY="server client wrk"

cat >"$WORK/common.js" <<'JS'
// A seeded generator (the same bytes at both ends).
exports.blob = function (n) {
  let x = (n * 2654435761) >>> 0 || 1;
  const len = [1, 100, 4096, 65536, 524288][n % 5] + (n * 97) % 3000;
  const b = Buffer.alloc(len);
  for (let i = 0; i < len; i++) {
    x ^= x << 13; x >>>= 0; x ^= x >>> 17; x ^= x << 5; x >>>= 0;
    b[i] = x & 255;
  }
  return b;
};
JS
cat >"$WORK/server.js" <<'JS'
const http = require('http'), crypto = require('crypto');
const { blob } = require('./common.js');
const blobs = [];
for (let n = 0; n < 50; n++) blobs.push(blob(n));
http.createServer({ keepAliveTimeout: 30000 }, (req, res) => {
  if (req.method === 'GET' && req.url.startsWith('/blob/')) {
    const b = blobs[parseInt(req.url.slice(6)) % 50];
    res.writeHead(200, { 'content-length': b.length });
    res.end(b);
  } else if (req.method === 'POST' && req.url === '/echo') {
    const h = crypto.createHash('sha256');
    req.on('data', (d) => h.update(d));
    req.on('end', () => {
      const d = h.digest('hex');
      res.writeHead(200, { 'content-length': d.length });
      res.end(d);
    });
  } else {
    res.writeHead(404);
    res.end();
  }
}).listen(parseInt(process.argv[2]), '127.0.0.1');
JS
cat >"$WORK/client.js" <<'JS'
const http = require('http'), crypto = require('crypto');
const { blob } = require('./common.js');
const port = parseInt(process.argv[2]), TOTAL = 3000, INFLIGHT = 64;
const agent = new http.Agent({ keepAlive: true, maxSockets: INFLIGHT });
const sha = (b) => crypto.createHash('sha256').update(b).digest('hex');
const want = [];
for (let n = 0; n < 50; n++) want.push(sha(blob(n)));
const answers = new Array(TOTAL);
let next = 0, done = 0, right = 0, wrong = 0, failed = 0, sockets = 0;
const origCreate = agent.createConnection.bind(agent);
agent.createConnection = (...a) => { sockets++; return origCreate(...a); };
function one(i) {
  const post = i % 3 === 2;
  const n = i % 50;
  const body = post ? blob(1000 + i).subarray(0, 1 + (i * 7919) % 262144) : null;
  const req = http.request({ host: '127.0.0.1', port, agent, method: post ? 'POST' : 'GET',
                             path: post ? '/echo' : '/blob/' + n,
                             headers: post ? { 'content-length': body.length } : {} }, (res) => {
    const parts = [];
    res.on('data', (d) => parts.push(d));
    res.on('end', () => {
      const got = Buffer.concat(parts);
      const ok = res.statusCode === 200 && (post ? got.toString() === sha(body) : sha(got) === want[n]);
      answers[i] = (ok ? 'ok ' : 'bad ') + (post ? got.toString() : sha(got));
      ok ? right++ : wrong++;
      finish();
    });
  });
  req.on('error', (e) => { answers[i] = 'error ' + e.code; failed++; finish(); });
  req.end(body || undefined);
}
function finish() {
  done++;
  if (next < TOTAL) one(next++);
  if (done === TOTAL) {
    console.log(`answers right ${right} of ${TOTAL}, wrong ${wrong}, failed ${failed}`);
    console.log(`sockets opened ${sockets}`);
    console.log('sha256 of all answers ' + sha(answers.join('\n')));
    agent.destroy();
  }
}
while (next < INFLIGHT) one(next++);
JS

mx_body() {
  local port pid
  port=$(free_port)
  mx_port node "$port"
  mx_bg server node "$WORK/server.js" "$port"
  pid=$BG_PID
  mx_wait_listen "$port" || { stop_bg "$pid"; return; }
  mx_client client node "$WORK/client.js" "$port"
  mx_check "client: all 3000 answers right ($(head -n 1 "$MX_OUT"))" \
    grep -qx 'answers right 3000 of 3000, wrong 0, failed 0' "$MX_OUT"
  mx_wrk wrk "http://127.0.0.1:$port/blob/7" -t2 -c32 -d4s
  mx_check "server still running" kill -0 "$pid"
  stop_bg "$pid"
}

mx_main
