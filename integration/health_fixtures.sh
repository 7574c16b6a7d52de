# shellcheck shell=bash
# integration/health_fixtures.sh: fixture sysfs trees for rdmashim health
# and doctor (RDMASHIM_SYSFS=ROOT), laid out as the kernel's rxe and mlx5
# drivers lay out /sys/class/infiniband. Sourced by t_health and t_doctor.

# put FILE TEXT: writes TEXT and a newline, making the folders.
put() { mkdir -p "$(dirname "$1")" && printf '%s\n' "$2" >"$1"; }

# rxe_tree ROOT: one rxe device over eth0 (hw_counters only, as rxe has).
rxe_tree() {
  local p=$1/class/infiniband/rxe0/ports/1 c
  put "$p/state" "4: ACTIVE"
  put "$p/phys_state" "5: LinkUp"
  put "$p/rate" "10 Gb/sec (1X QDR)"
  put "$p/link_layer" "Ethernet"
  put "$p/gids/0" "fe80:0000:0000:0000:5054:00ff:fe12:3456"
  put "$p/gid_attrs/types/0" "IB/RoCE v1"
  put "$p/gid_attrs/ndevs/0" "eth0"
  put "$p/gids/1" "fe80:0000:0000:0000:5054:00ff:fe12:3456"
  put "$p/gid_attrs/types/1" "RoCE v2"
  put "$p/gid_attrs/ndevs/1" "eth0"
  put "$p/gids/2" "0000:0000:0000:0000:0000:0000:0000:0000"
  for c in sent_pkts rcvd_pkts duplicate_request out_of_seq_request rcvd_rnr_err send_rnr_err rcvd_seq_err \
    ack_deferred retry_exceeded_err retry_rnr_exceeded_err completer_retry_err send_err link_downed; do
    put "$p/hw_counters/$c" 0
  done
  put "$p/hw_counters/sent_pkts" 123456
  put "$1/class/net/eth0/mtu" 1500
}

# mlx5_tree ROOT: one mlx5 port over enp1s0f0 (counters/ and hw_counters/).
mlx5_tree() {
  local p=$1/class/infiniband/mlx5_0/ports/1 c
  put "$p/state" "4: ACTIVE"
  put "$p/phys_state" "5: LinkUp"
  put "$p/rate" "100 Gb/sec (4X EDR)"
  put "$p/link_layer" "Ethernet"
  put "$p/gids/3" "0000:0000:0000:0000:0000:ffff:c0a8:0a01"
  put "$p/gid_attrs/types/3" "RoCE v2"
  put "$p/gid_attrs/ndevs/3" "enp1s0f0"
  for c in symbol_error link_downed port_rcv_errors port_xmit_discards VL15_dropped local_link_integrity_errors \
    excessive_buffer_overrun_errors port_rcv_data port_xmit_data port_rcv_packets; do
    put "$p/counters/$c" 0
  done
  for c in out_of_buffer out_of_sequence duplicate_request rnr_nak_retry_err packet_seq_err implied_nak_seq_err \
    local_ack_timeout_err req_cqe_error resp_cqe_error rp_cnp_handled rp_cnp_ignored np_cnp_sent \
    np_ecn_marked_roce_packets rx_write_requests; do
    put "$p/hw_counters/$c" 0
  done
  put "$p/hw_counters/np_cnp_sent" 77
  put "$1/class/infiniband/mlx5_0/device/net/enp1s0f0/.keep" ""
  put "$1/class/net/enp1s0f0/mtu" 9000
}

