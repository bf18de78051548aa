// SPDX-License-Identifier: GPL-2.0
/*
 * Service tracing (R-Pingmesh §3.2): learn each RC connection's destination GID and flow label
 * from the kernel's modify_qp / destroy_qp, the two facts `rdma resource show qp` does not list.
 *
 * A bcc program (loaded by producers/service_trace/tracer.py with BPF(src_file=...)); bcc
 * compiles it against the running kernel's headers, so the struct layouts below are the
 * kernel's own (include/rdma/ib_verbs.h). Not loadable on hosts without RDMA or bcc.
 *
 * Probes (the tracer attaches the first modify symbol that exists; _ib_modify_qp is static and
 * may be inlined, so ib_modify_qp_with_udata is the fallback):
 *   kprobe:_ib_modify_qp / ib_modify_qp_with_udata (struct ib_qp *, struct ib_qp_attr *, int mask, ...)
 *       -> one MODIFY event on the transition to RTR with an address vector (IB_QP_STATE|IB_QP_AV)
 *   kprobe:ib_destroy_qp_user (struct ib_qp *, struct ib_udata *)
 *       -> one DESTROY event
 * Entry probes see the attributes the application asked for: a flow label of 0 means the driver
 * picks the UDP source port itself (rdma_get_udp_sport on rxe/irdma), which the Python side
 * reproduces from the two QPNs.
 */
#include <uapi/linux/ptrace.h>
#include <linux/sched.h>
#include <rdma/ib_verbs.h>

#define EV_MODIFY 1
#define EV_DESTROY 2

struct qp_event_t {
    u64 ts_ns;
    u64 cgroup_id;
    u32 pid;            /* tgid: the process */
    u32 kind;           /* EV_MODIFY or EV_DESTROY */
    u32 qpn;
    u32 dest_qpn;
    u32 flow_label;     /* 20 bits, from ah_attr.grh.flow_label */
    u8 sgid_index;
    u8 traffic_class;   /* IPv6 traffic class byte: DSCP << 2 | ECN */
    u8 pad[2];
    u8 dgid[16];        /* ah_attr.grh.dgid.raw, network order */
    char comm[TASK_COMM_LEN];
    char dev[IB_DEVICE_NAME_MAX];
};

BPF_PERF_OUTPUT(qp_events);

static __always_inline void fill_common(struct qp_event_t *ev, struct ib_qp *qp, u32 kind)
{
    u64 pid_tgid = bpf_get_current_pid_tgid();
    struct ib_device *device = NULL;

    ev->ts_ns = bpf_ktime_get_ns();
    ev->cgroup_id = bpf_get_current_cgroup_id();
    ev->pid = pid_tgid >> 32;
    ev->kind = kind;
    bpf_get_current_comm(&ev->comm, sizeof(ev->comm));
    bpf_probe_read_kernel(&ev->qpn, sizeof(ev->qpn), &qp->qp_num);
    bpf_probe_read_kernel(&device, sizeof(device), &qp->device);
    if (device)
        bpf_probe_read_kernel_str(&ev->dev, sizeof(ev->dev), device->name);
}

static __always_inline int on_modify(struct pt_regs *ctx, struct ib_qp *qp, struct ib_qp_attr *attr, int mask)
{
    struct qp_event_t ev = {};
    enum ib_qp_state state = 0;

    if (!(mask & IB_QP_STATE) || !(mask & IB_QP_AV))
        return 0;
    bpf_probe_read_kernel(&state, sizeof(state), &attr->qp_state);
    if (state != IB_QPS_RTR)
        return 0;
    fill_common(&ev, qp, EV_MODIFY);
    if (mask & IB_QP_DEST_QPN)
        bpf_probe_read_kernel(&ev.dest_qpn, sizeof(ev.dest_qpn), &attr->dest_qp_num);
    bpf_probe_read_kernel(&ev.dgid, sizeof(ev.dgid), &attr->ah_attr.grh.dgid.raw);
    bpf_probe_read_kernel(&ev.flow_label, sizeof(ev.flow_label), &attr->ah_attr.grh.flow_label);
    bpf_probe_read_kernel(&ev.sgid_index, sizeof(ev.sgid_index), &attr->ah_attr.grh.sgid_index);
    bpf_probe_read_kernel(&ev.traffic_class, sizeof(ev.traffic_class), &attr->ah_attr.grh.traffic_class);
    ev.flow_label &= 0xFFFFF;
    qp_events.perf_submit(ctx, &ev, sizeof(ev));
    return 0;
}

/* The tracer attaches these by name (attach_kprobe(event=..., fn_name=...)). */
int trace_modify_qp(struct pt_regs *ctx, struct ib_qp *qp, struct ib_qp_attr *attr, int mask)
{
    return on_modify(ctx, qp, attr, mask);
}

int trace_destroy_qp(struct pt_regs *ctx, struct ib_qp *qp)
{
    struct qp_event_t ev = {};

    fill_common(&ev, qp, EV_DESTROY);
    qp_events.perf_submit(ctx, &ev, sizeof(ev));
    return 0;
}
