/*
 * Reason codes: every decision the shim makes about a connection names one.
 * This table is the only list; `rdmashim reasons` prints it and the stats count by it.
 * New codes go at the end, so that the numbers `rdmashim reasons` prints stay.
 * X(identifier, "trace name", "what it means")
 */
#ifndef RDMASHIM_REASON_H
#define RDMASHIM_REASON_H

#define SHIM_REASONS(X)                                                                        \
	X(NONE, "none", "no reason recorded")                                                  \
	X(WHITELISTED, "whitelisted", "the server port is in RDMASHIM_PORTS: tracked")         \
	X(NOT_WHITELISTED, "not_whitelisted", "the server port is not in RDMASHIM_PORTS")      \
	X(NOT_TCP, "not_tcp", "not an AF_INET/AF_INET6 stream socket")                        \
	X(AB_EXCLUDED, "ab_excluded", "the 4-tuple hash fell outside RDMASHIM_AB_PERCENT")     \
	X(TCP_ONLY, "tcp_only", "RDMASHIM_TRANSPORTS=tcp: never upgrade")                     \
	X(UPGRADED, "upgraded", "the side channel carries this direction now")                \
	X(PEER_NO_SHIM, "peer_no_shim", "the peer answered no offer: it runs without the shim") \
	X(NOT_SAME_HOST, "not_same_host", "the peer is on another host: no shared memory")     \
	X(VERIFY_FAILED, "verify_failed", "the offer did not prove it owns the TCP connection") \
	X(HANDSHAKE_MALFORMED, "handshake_malformed", "a malformed or truncated handshake")    \
	X(SWITCH_MISMATCH, "switch_mismatch", "the in-band switch frame did not match: plain peer") \
	X(RING_ALLOC_FAILED, "ring_alloc_failed", "could not allocate or map the ring memory")  \
	X(TIMEOUT, "timeout", "the upgrade did not finish in RDMASHIM_UPGRADE_TIMEOUT_MS")      \
	X(PEER_CLOSED, "peer_closed", "the peer closed or shut down before the upgrade")        \
	X(BREAKER_OPEN, "breaker_open", "the peer's RDMA breaker is open: attempt skipped")     \
	X(CM_TIMEOUT, "cm_timeout", "an RDMA connection-manager wait timed out")                \
	X(CM_REJECTED, "cm_rejected", "the RDMA connection was rejected")                       \
	X(CM_UNREACHABLE, "cm_unreachable", "the peer is unreachable over RDMA")                \
	X(NO_RDMA_DEVICE, "no_rdma_device", "this host has no usable RDMA device")             \
	X(SHUTDOWN, "shutdown", "the write side was shut down before the switch")               \
	X(NO_TRANSPORT, "no_transport", "no configured transport fits this peer")                \
	X(RENDEZVOUS_BUSY, "rendezvous_busy", "the rendezvous name was taken by another socket") \
	X(INTERNAL_ERROR, "internal_error", "an unexpected local failure: stays on TCP")        \
	X(FD_LIMIT, "fd_limit",                                                                 \
	  "the process is near its fd limit (the shim leaves the last 1/32 of RLIMIT_NOFILE to the program): stays on TCP") \
	X(CONFIG_INVALID, "config_invalid", "a configuration value is invalid: shim inert")      \
	X(RDMA_WARMING, "rdma_warming",                                                         \
	  "the RDMA warm-up did not end in 10x RDMASHIM_UPGRADE_TIMEOUT_MS (30 s at least)")  \
	X(RDMA_INHERITED, "rdma_inherited",                                                     \
	  "the process was forked after its parent set up RDMA; the child stays on TCP/shm") \
	X(CHAN_FAILED, "chan_failed", "the side channel failed: the stream resumed on TCP")      \
	X(RESUME_FAILED, "resume_failed", "the channel failed where no resume is possible: reset") \
	X(PEER_VIOLATION, "peer_violation",                                                     \
	  "the peer wrote a value outside the protocol's bounds (cursor, immediate, credit, frame)") \
	X(RATE_LIMITED, "rate_limited", "too many refused rendezvous attempts: some were not looked at") \
	X(BYPASS, "bypass",                                                                     \
	  "the socket is read or written where the shim can not see (stdio, splice) or carries urgent data: stays on TCP") \
	X(SANDBOXED, "sandboxed",                                                               \
	  "the process has a seccomp filter: its connections stay on the kernel's own calls")   \
	X(UNPROVEN_PEER, "unproven_peer",                                                       \
	  "the side-channel peer did not prove it owns the TCP connection in time") \
	X(HANDED_OFF, "handed_off",                                                             \
	  "passed to another process (SCM_RIGHTS, exec) or sandboxed after its switch, and could not go back to TCP first: reset") \
	X(RING_FULL, "ring_full",                                                               \
	  "the ring stayed full with the peer not reading: back to TCP, whose buffers are larger") \
	X(ADOPTED_MID_STREAM, "adopted_mid_stream",                                             \
	  "inherited or received with bytes already moved: the ends may not agree on offsets, stays on TCP") \
	X(OOB, "oob",                                                                           \
	  "urgent data (MSG_OOB) sent after the switch: back to TCP, which alone carries the urgent mark") \
	X(FORKED, "forked",                                                                     \
	  "a fork while the upgrade was being negotiated, or one after which another process moved the stream: stays on TCP") \
	X(UNPAID, "unpaid",                                                                     \
	  "RDMASHIM_UNPAID_PERCENT of the exchanges woke their sleeping receivers with bells: back to TCP, which is cheaper then") \
	X(RDMA_PORT_DOWN, "rdma_port_down",                                                     \
	  "the RDMA port the connection uses or would use is not active (its link is down): on TCP") \
	X(REAPER_JAMMED, "reaper_jammed",                                                       \
	  "a descriptor a peer passed blocks in its release (the shim's reaper is stuck): no new side channel until it moves") \
	X(SHADOW, "shadow",                                                                     \
	  "RDMASHIM_MODE=shadow: the upgrade stopped at the switch, or ended before it for the reason traced with upgrade.shadow; or an RDMA peer in shadow mode withdrew at its cut: stays on TCP") \
	X(RDMA_PORT_FAULTY, "rdma_port_faulty",                                                 \
	  "the RDMA port the connection would use has a fault counter over its limit (rdmashim health's judgement, at the port watch's last look): on TCP until it recovers") \
	X(CQ_STALL, "cq_stall",                                                                   \
	  "an RDMA link's completion queue stopped delivering: the peer's tail words stood ahead of what its completions told for RDMASHIM_RDMA_STALL_MS; the link broke and its connections failed over to TCP")

enum shim_reason {
#define SHIM_REASON_ENUM(id, name, text) SHIM_REASON_##id,
	SHIM_REASONS(SHIM_REASON_ENUM)
#undef SHIM_REASON_ENUM
	SHIM_REASON_COUNT
};

const char *shim_reason_name(enum shim_reason reason);
const char *shim_reason_text(enum shim_reason reason);

#endif
