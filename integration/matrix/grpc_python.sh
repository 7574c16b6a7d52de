#!/bin/bash
# matrix/grpc_python: gRPC over HTTP/2 in the clear (python3-grpcio: the
# C core's own I/O threads and epoll poller, HTTP/2 framing with flow
# control, sendmsg and recvmsg on non-blocking sockets) at both ends,
# without protobuf: methods on raw bytes. The server (a pool of 8 handler
# threads) has a unary Hash (answers the request's SHA-256) and a
# bidirectional stream Echo (answers each message with itself reversed).
# The client opens 6 channels, each with its own subchannel pool (so its
# own TCP connection), and on each, at once: 150 unary calls of 1 B to
# 256 KiB (seeded) as futures, and one Echo stream of 100 messages. Result:
# the client's exit status, the unary answers right (900) and stream
# answers right (600), failed calls (0), and a SHA-256 over all answers in
# call order.
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
"$PY3" -c 'import grpc' 2>/dev/null || skip "python3-grpcio is not installed"
MX_SWITCHED_BY="client server"

SERVER='
import grpc, hashlib, sys, time
from concurrent import futures
def hash_(req, ctx):
    return hashlib.sha256(req).digest()
def echo(it, ctx):
    for m in it:
        yield m[::-1]
handler = grpc.method_handlers_generic_handler("mx.Svc", {
    "Hash": grpc.unary_unary_rpc_method_handler(hash_),
    "Echo": grpc.stream_stream_rpc_method_handler(echo),
})
opts = [("grpc.max_receive_message_length", 1 << 22), ("grpc.max_send_message_length", 1 << 22)]
s = grpc.server(futures.ThreadPoolExecutor(max_workers=8), handlers=[handler], options=opts)
s.add_insecure_port("127.0.0.1:" + sys.argv[1])
s.start()
s.wait_for_termination()
'
CLIENT='
import grpc, hashlib, random, sys, threading
port = sys.argv[1]
CH, UNARY, STREAM = 6, 150, 100
opts = [("grpc.use_local_subchannel_pool", 1), ("grpc.max_receive_message_length", 1 << 22),
        ("grpc.max_send_message_length", 1 << 22)]
res = {}
lock = threading.Lock()
def one(c):
    rng = random.Random(9100 + c)
    ch = grpc.insecure_channel("127.0.0.1:" + port, options=opts)
    grpc.channel_ready_future(ch).result(timeout=60)
    hash_ = ch.unary_unary("/mx.Svc/Hash")
    echo = ch.stream_stream("/mx.Svc/Echo")
    reqs = [rng.randbytes(rng.choice((1, 100, 4096, 65536, 262144, rng.randint(1, 262144)))) for _ in range(UNARY)]
    msgs = [rng.randbytes(rng.randint(1, 32768)) for _ in range(STREAM)]
    futs = [hash_.future(r, timeout=120) for r in reqs]
    u_ok, s_ok, failed, h = 0, 0, 0, hashlib.sha256()
    try:
        for i, m in enumerate(echo(iter(msgs), timeout=120)):
            s_ok += m == msgs[i][::-1]
            h.update(m)
    except grpc.RpcError as e:
        failed += 1
        print("channel %d stream: %s" % (c, e.code()), file=sys.stderr)
    for r, f in zip(reqs, futs):
        try:
            got = f.result()
            u_ok += got == hashlib.sha256(r).digest()
            h.update(got)
        except grpc.RpcError as e:
            failed += 1
            print("channel %d unary: %s" % (c, e.code()), file=sys.stderr)
    ch.close()
    with lock:
        res[c] = (u_ok, s_ok, failed, h.hexdigest())
ts = [threading.Thread(target=one, args=(c,)) for c in range(CH)]
[t.start() for t in ts]
[t.join() for t in ts]
print("unary right %d of %d" % (sum(r[0] for r in res.values()), CH * UNARY))
print("stream right %d of %d" % (sum(r[1] for r in res.values()), CH * STREAM))
print("failed %d, channels done %d" % (sum(r[2] for r in res.values()), len(res)))
print("sha256 " + hashlib.sha256("".join(res[c][3] for c in sorted(res)).encode()).hexdigest())
'

mx_body() {
  local port pid
  port=$(free_port)
  mx_port grpc "$port"
  mx_bg server "$PY3" -c "$SERVER" "$port"
  pid=$BG_PID
  mx_wait_listen "$port" || { stop_bg "$pid"; return; }
  mx_client client "$PY3" -c "$CLIENT" "$port"
  mx_check "all 900 unary and 600 stream answers right, no failed call" \
    test "$(head -n 3 "$MX_OUT" | tr '\n' ' ')" = "unary right 900 of 900 stream right 600 of 600 failed 0, channels done 6 "
  mx_check "server still running" kill -0 "$pid"
  stop_bg "$pid"
}

mx_main
