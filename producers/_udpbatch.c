/* Batched socket calls for the udp agent: recvmmsg(2) and sendmmsg(2) with kernel timestamps.
 *
 * The agent's engine (producers/udp_prober.py) reads and writes one datagram per Python call when this
 * module is absent; with it, one call reads every queued datagram of a socket (up to BATCH) and parses
 * the ancillary data in C, and one call sends a socket's queued replies. The responder's side of the
 * protocol stays in Python; the prober's commonest steps (below) are here.
 *
 * recv_rx(fd, hardware) -> [(payload: bytes, ip: str, port: int, t_rx_ns: int | None), ...]
 * recv_err(fd, hardware) -> [(origin, ts_ns | None, key, icmp_type, icmp_code, offender, payload, dst_ip, dst_port), ...]
 *     The error-queue tuple is producers.kernel_ts.ErrQueueEntry's fields, in its order, and the same
 *     filter: TX send timestamps (SCM_TSTAMP_SND, ENOMSG) and ICMP errors; other entries are skipped.
 * send_many(fd, [(payload: bytes, ip: str, port: int, ttl: int, key: int, tx_flags: int), ...]) -> int
 *     key >= 0 adds SCM_TS_OPT_ID (the timestamp key), ttl > 0 adds IP_TTL, tx_flags != 0 adds
 *     SO_TIMESTAMPING (request a TX timestamp for this datagram). Returns how many were sent, in order;
 *     fewer than given when the kernel refused the next one (its errno is not reported: the caller
 *     resends that one alone to learn it).
 *
 * Both receive calls return [] when nothing is queued (EAGAIN) and raise OSError for any other error
 * (a pending socket error, sk_err, surfaces this way on the receive path, as with recvmsg).
 *
 * send_probes([(fd, seq, qpn, prober_qpn, ip, port, key, tx_flags, probe, sent), ...]) -> int
 *     The probes due now, each on its own socket with its TX timestamp keyed ``key`` (``sent`` then maps the key
 *     to ("probe", seq)); each probe's t1 is read just before its send. Stops at the first the kernel refuses,
 *     as send_many.
 *
 * The prober's side, on a prober socket (one per 5-tuple), against the engine's own state (its ``pending``
 * dict seq -> PendingProbe, and the endpoint's ``sent`` dict of TX timestamp keys), with the same outcome as
 * UdpEngine._on_packet and _on_tx_timestamp (producers/udp_prober.py), and the same errors as the calls above:
 * prober_rx(fd, hardware, pending) -> (finished, others)
 *     ACK1 and ACK2 of pending probes fill in t5/t6 and t3/t4/responder_hw (an answer from another address
 *     than the probe's dst_ip, or for no pending probe, is dropped); a probe with both is taken out of
 *     ``pending`` and listed in ``finished``. ``others``: every other datagram, as recv_rx lists them.
 * prober_err(fd, hardware, pending, sent) -> (entries, others)
 *     A TX timestamp whose key ``sent`` maps to ("probe", seq) is taken out of ``sent`` and is that
 *     probe's t2. ``others``: the other entries, as recv_err lists them; ``entries``: how many entries the
 *     filter kept in all (0: the caller clears a pending socket error, as after recv_err's []).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <arpa/inet.h>
#include <errno.h>
#include <linux/errqueue.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#define BATCH 64
#define DATA 256
#define CTRL 512
#define SCM_TS_OPT_ID_ 81 /* Linux 6.13+; older kernels refuse it with EINVAL, which the caller handles */

typedef struct {
    struct mmsghdr msgs[BATCH];
    struct iovec iov[BATCH];
    struct sockaddr_in addrs[BATCH];
    char data[BATCH][DATA];
    char ctrl[BATCH][CTRL];
} RecvBuffers;

static int recv_all(int fd, int flags, RecvBuffers *b) {
    memset(b->msgs, 0, sizeof(b->msgs));
    for (int i = 0; i < BATCH; i++) {
        b->iov[i].iov_base = b->data[i];
        b->iov[i].iov_len = DATA;
        b->msgs[i].msg_hdr.msg_name = &b->addrs[i];
        b->msgs[i].msg_hdr.msg_namelen = sizeof(b->addrs[i]);
        b->msgs[i].msg_hdr.msg_iov = &b->iov[i];
        b->msgs[i].msg_hdr.msg_iovlen = 1;
        b->msgs[i].msg_hdr.msg_control = b->ctrl[i];
        b->msgs[i].msg_hdr.msg_controllen = CTRL;
    }
    int n;
    Py_BEGIN_ALLOW_THREADS
    n = recvmmsg(fd, b->msgs, BATCH, flags | MSG_DONTWAIT, NULL);
    Py_END_ALLOW_THREADS
    return n;
}

/* SCM_TIMESTAMPING's slot 0 (software) or 2 (raw hardware) in ns; -1 when absent or zero. */
static long long timestamp_of(struct msghdr *h, int hardware) {
    for (struct cmsghdr *c = CMSG_FIRSTHDR(h); c; c = CMSG_NXTHDR(h, c)) {
        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SO_TIMESTAMPING &&
            c->cmsg_len >= CMSG_LEN(3 * sizeof(struct timespec))) {
            struct timespec ts[3];
            memcpy(ts, CMSG_DATA(c), sizeof(ts));
            struct timespec t = hardware ? ts[2] : ts[0];
            if (t.tv_sec || t.tv_nsec) return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
        }
    }
    return -1;
}

static PyObject *ns_or_none(long long ts) {
    if (ts < 0) Py_RETURN_NONE;
    return PyLong_FromLongLong(ts);
}

static PyObject *ip_str(struct in_addr a) {
    char buf[INET_ADDRSTRLEN];
    inet_ntop(AF_INET, &a, buf, sizeof(buf));
    return PyUnicode_FromString(buf);
}

static PyObject *append_steal(PyObject *list, PyObject *item) {
    if (item == NULL || PyList_Append(list, item) < 0) {
        Py_XDECREF(item);
        Py_DECREF(list);
        return NULL;
    }
    Py_DECREF(item);
    return list;
}

/* Read socket fd's queue with ``flags``; returns the buffers (caller frees) with *n messages, or NULL with
 * *early set: [] when nothing is queued, NULL (an exception) on an error. */
static RecvBuffers *recv_start(int fd, int flags, int *n, PyObject **early) {
    *early = NULL;
    RecvBuffers *b = PyMem_Malloc(sizeof(RecvBuffers));
    if (b == NULL) {
        *early = PyErr_NoMemory();
        return NULL;
    }
    *n = recv_all(fd, flags, b);
    if (*n >= 0) return b;
    int e = errno;
    PyMem_Free(b);
    if (e == EAGAIN || e == EWOULDBLOCK || e == EINTR) {
        *early = PyList_New(0);
    } else {
        errno = e;
        *early = PyErr_SetFromErrno(PyExc_OSError);
    }
    return NULL;
}

static unsigned msg_len(RecvBuffers *b, int i) {
    return b->msgs[i].msg_len < DATA ? b->msgs[i].msg_len : DATA;
}

/* recv_rx's tuple for message i: (payload, ip, port, t_rx_ns | None). */
static PyObject *rx_item(RecvBuffers *b, int i, int hardware) {
    return Py_BuildValue("(y#NiN)", b->data[i], (Py_ssize_t)msg_len(b, i), ip_str(b->addrs[i].sin_addr),
                         (int)ntohs(b->addrs[i].sin_port), ns_or_none(timestamp_of(&b->msgs[i].msg_hdr, hardware)));
}

static PyObject *recv_rx(PyObject *self, PyObject *args) {
    int fd, n, hardware;
    PyObject *early;
    if (!PyArg_ParseTuple(args, "ip", &fd, &hardware)) return NULL;
    RecvBuffers *b = recv_start(fd, 0, &n, &early);
    if (b == NULL) return early;
    PyObject *out = PyList_New(0);
    for (int i = 0; out && i < n; i++) out = append_steal(out, rx_item(b, i, hardware));
    PyMem_Free(b);
    return out;
}

/* The IP_RECVERR cmsg of error-queue message i that recv_err keeps (a TX send timestamp or an ICMP error),
 * its sock_extended_err copied to *ee; NULL for any other entry. */
static struct cmsghdr *err_cmsg(RecvBuffers *b, int i, struct sock_extended_err *ee) {
    struct msghdr *h = &b->msgs[i].msg_hdr;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(h); c; c = CMSG_NXTHDR(h, c)) {
        if (c->cmsg_level != SOL_IP || c->cmsg_type != IP_RECVERR ||
            c->cmsg_len < CMSG_LEN(sizeof(struct sock_extended_err)))
            continue;
        memcpy(ee, CMSG_DATA(c), sizeof(*ee));
        if (ee->ee_origin == SO_EE_ORIGIN_TIMESTAMPING)
            return ee->ee_info == SCM_TSTAMP_SND && ee->ee_errno == ENOMSG ? c : NULL;
        return ee->ee_origin == SO_EE_ORIGIN_ICMP ? c : NULL;
    }
    return NULL;
}

/* recv_err's tuple for message i, whose kept cmsg is c. */
static PyObject *err_item(RecvBuffers *b, int i, struct cmsghdr *c, struct sock_extended_err *ee, int hardware) {
    if (ee->ee_origin == SO_EE_ORIGIN_TIMESTAMPING)
        return Py_BuildValue("(iNIiisy#si)", (int)ee->ee_origin, ns_or_none(timestamp_of(&b->msgs[i].msg_hdr, hardware)),
                             (unsigned)ee->ee_data, 0, 0, "", "", (Py_ssize_t)0, "", 0);
    PyObject *offender = NULL;
    if (c->cmsg_len >= CMSG_LEN(sizeof(*ee) + sizeof(struct sockaddr_in))) {
        struct sockaddr_in off;
        memcpy(&off, CMSG_DATA(c) + sizeof(*ee), sizeof(off));
        if (off.sin_family == AF_INET) offender = ip_str(off.sin_addr);
    }
    if (offender == NULL) offender = PyUnicode_FromString("");
    /* msg_name of an error-queue message: where the offending datagram was sent (address and port) */
    return Py_BuildValue("(iOIiiNy#Ni)", (int)ee->ee_origin, Py_None, 0U, (int)ee->ee_type, (int)ee->ee_code,
                         offender, b->data[i], (Py_ssize_t)msg_len(b, i), ip_str(b->addrs[i].sin_addr),
                         (int)ntohs(b->addrs[i].sin_port));
}

static PyObject *recv_err(PyObject *self, PyObject *args) {
    int fd, n, hardware;
    PyObject *early;
    if (!PyArg_ParseTuple(args, "ip", &fd, &hardware)) return NULL;
    RecvBuffers *b = recv_start(fd, MSG_ERRQUEUE, &n, &early);
    if (b == NULL) return early;
    PyObject *out = PyList_New(0);
    for (int i = 0; out && i < n; i++) {
        struct sock_extended_err ee;
        struct cmsghdr *c = err_cmsg(b, i, &ee);
        if (c != NULL) out = append_steal(out, err_item(b, i, c, &ee, hardware));
    }
    PyMem_Free(b);
    return out;
}

typedef struct {
    struct mmsghdr msgs[BATCH];
    struct iovec iov[BATCH];
    struct sockaddr_in addrs[BATCH];
    char ctrl[BATCH][CMSG_SPACE(sizeof(int)) * 3];
} SendBuffers;

static PyObject *send_many(PyObject *self, PyObject *args) {
    int fd;
    PyObject *items;
    if (!PyArg_ParseTuple(args, "iO!", &fd, &PyList_Type, &items)) return NULL;
    Py_ssize_t total = PyList_GET_SIZE(items), done = 0;
    SendBuffers *b = PyMem_Malloc(sizeof(SendBuffers));
    if (b == NULL) return PyErr_NoMemory();
    while (done < total) {
        int m = (int)(total - done < BATCH ? total - done : BATCH);
        memset(b->msgs, 0, sizeof(b->msgs));
        memset(b->ctrl, 0, sizeof(b->ctrl));
        for (int i = 0; i < m; i++) {
            const char *payload, *ip;
            Py_ssize_t plen;
            int port, ttl, tx_flags;
            long long key;
            PyObject *it = PyList_GET_ITEM(items, done + i);
            if (!PyArg_ParseTuple(it, "y#siiLi", &payload, &plen, &ip, &port, &ttl, &key, &tx_flags)) {
                PyMem_Free(b);
                return NULL;
            }
            memset(&b->addrs[i], 0, sizeof(b->addrs[i]));
            b->addrs[i].sin_family = AF_INET;
            b->addrs[i].sin_port = htons((unsigned short)port);
            if (inet_pton(AF_INET, ip, &b->addrs[i].sin_addr) != 1) {
                PyMem_Free(b);
                return PyErr_Format(PyExc_ValueError, "send_many: %s is not an IPv4 address", ip);
            }
            /* the payload's buffer belongs to the list's tuple, which outlives this call */
            b->iov[i].iov_base = (void *)payload;
            b->iov[i].iov_len = (size_t)plen;
            struct msghdr *h = &b->msgs[i].msg_hdr;
            h->msg_name = &b->addrs[i];
            h->msg_namelen = sizeof(b->addrs[i]);
            h->msg_iov = &b->iov[i];
            h->msg_iovlen = 1;
            size_t clen = 0;
            char *cbuf = b->ctrl[i];
            struct {
                int level, type, value;
                int on;
            } opts[3] = {{SOL_IP, IP_TTL, ttl, ttl > 0},
                         {SOL_SOCKET, SCM_TS_OPT_ID_, (int)(unsigned)key, key >= 0},
                         {SOL_SOCKET, SO_TIMESTAMPING, tx_flags, tx_flags != 0}};
            for (int k = 0; k < 3; k++) {
                if (!opts[k].on) continue;
                struct cmsghdr *c = (struct cmsghdr *)(cbuf + clen);
                c->cmsg_level = opts[k].level;
                c->cmsg_type = opts[k].type;
                c->cmsg_len = CMSG_LEN(sizeof(int));
                memcpy(CMSG_DATA(c), &opts[k].value, sizeof(int));
                clen += CMSG_SPACE(sizeof(int));
            }
            h->msg_control = clen ? cbuf : NULL;
            h->msg_controllen = clen;
        }
        int n;
        Py_BEGIN_ALLOW_THREADS
        n = sendmmsg(fd, b->msgs, (unsigned)m, MSG_DONTWAIT);
        Py_END_ALLOW_THREADS
        if (n <= 0) break;
        done += n;
        if (n < m) break;
    }
    PyMem_Free(b);
    return PyLong_FromSsize_t(done);
}


/* ---- the prober's side: ACK1, ACK2 and the probes' TX timestamps (see the top of the file) ---------- */

/* the wire format of producers/udp_wire.py: magic "FS", version 1, kind, seq (8), QPN (4), the prober's
 * QPN (4), t3 (8), t4 (8), hardware (1); big-endian */
#define WIRE_HEAD 37
#define KIND_ACK1 2
#define KIND_ACK2 3

static PyObject *s_entry, *s_dst_ip, *s_probe, *s_t1, *s_t2, *s_t3, *s_t4, *s_t5, *s_t6, *s_responder_hw;

static unsigned long long be64(const unsigned char *p) {
    unsigned long long v = 0;
    for (int k = 0; k < 8; k++) v = (v << 8) | p[k];
    return v;
}

static unsigned be32(const unsigned char *p) {
    return ((unsigned)p[0] << 24) | ((unsigned)p[1] << 16) | ((unsigned)p[2] << 8) | p[3];
}

static long long now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}

/* Set attribute ``name`` of p to a new int v; 0, or -1 with an exception. */
static int set_ns(PyObject *p, PyObject *name, long long v) {
    PyObject *o = PyLong_FromLongLong(v);
    if (o == NULL) return -1;
    int r = PyObject_SetAttr(p, name, o);
    Py_DECREF(o);
    return r;
}

/* Whether attribute ``name`` of p is None: 1, 0, or -1 with an exception. */
static int is_none(PyObject *p, PyObject *name) {
    PyObject *o = PyObject_GetAttr(p, name);
    if (o == NULL) return -1;
    int r = o == Py_None;
    Py_DECREF(o);
    return r;
}

/* Whether the probe p was sent to the address ``ip`` (its entry's dst_ip): 1, 0, or -1 with an exception. */
static int sent_to(PyObject *p, PyObject *ip) {
    PyObject *entry = PyObject_GetAttr(p, s_entry);
    if (entry == NULL) return -1;
    PyObject *dst = PyDict_Check(entry) ? PyDict_GetItemWithError(entry, s_dst_ip) : NULL;
    int r = dst != NULL ? PyObject_RichCompareBool(dst, ip, Py_EQ) : (PyErr_Occurred() ? -1 : 0);
    Py_DECREF(entry);
    return r;
}

/* One ACK (kind, payload d) from ``ip`` for the pending probes: the same steps as UdpEngine._on_packet.
 * Returns 0, or -1 with an exception. */
static int on_ack(PyObject *pending, PyObject *finished, int kind, const unsigned char *d, PyObject *ip,
                  long long t_rx, long long t_user) {
    PyObject *seq = PyLong_FromUnsignedLongLong(be64(d + 4));
    if (seq == NULL) return -1;
    int r = -1;
    PyObject *p = PyDict_GetItemWithError(pending, seq); /* borrowed */
    if (p == NULL) {
        r = PyErr_Occurred() ? -1 : 0;
        goto done;
    }
    Py_INCREF(p);
    int to = sent_to(p, ip);
    if (to <= 0) {
        r = to;
        goto drop;
    }
    int other; /* whether the other reply came already: then the probe is finished */
    if (kind == KIND_ACK1) {
        int fresh = is_none(p, s_t5);
        if (fresh <= 0) {
            r = fresh;
            goto drop;
        }
        if (set_ns(p, s_t5, t_rx >= 0 ? t_rx : t_user) < 0 || set_ns(p, s_t6, t_user) < 0) goto drop;
        other = is_none(p, s_t3);
    } else {
        if (set_ns(p, s_t3, (long long)be64(d + 20)) < 0 || set_ns(p, s_t4, (long long)be64(d + 28)) < 0 ||
            PyObject_SetAttr(p, s_responder_hw, d[36] ? Py_True : Py_False) < 0)
            goto drop;
        other = is_none(p, s_t5);
    }
    if (other < 0) goto drop;
    r = 0;
    if (!other && (PyDict_DelItem(pending, seq) < 0 || PyList_Append(finished, p) < 0)) r = -1;
drop:
    Py_DECREF(p);
done:
    Py_DECREF(seq);
    return r;
}

static PyObject *prober_rx(PyObject *self, PyObject *args) {
    int fd, n, hardware;
    PyObject *pending, *early;
    if (!PyArg_ParseTuple(args, "ipO!", &fd, &hardware, &PyDict_Type, &pending)) return NULL;
    RecvBuffers *b = recv_start(fd, 0, &n, &early);
    if (b == NULL) {
        if (early == NULL) return NULL;
        return Py_BuildValue("(NN)", PyList_New(0), early);
    }
    long long t_user = now_ns();
    PyObject *finished = PyList_New(0), *others = PyList_New(0);
    for (int i = 0; finished && others && i < n; i++) {
        const unsigned char *d = (const unsigned char *)b->data[i];
        int kind = msg_len(b, i) >= WIRE_HEAD && d[0] == 'F' && d[1] == 'S' && d[2] == 1 ? d[3] : 0;
        if (kind != KIND_ACK1 && kind != KIND_ACK2) {
            others = append_steal(others, rx_item(b, i, hardware));
            continue;
        }
        PyObject *ip = ip_str(b->addrs[i].sin_addr);
        int r = ip ? on_ack(pending, finished, kind, d, ip, timestamp_of(&b->msgs[i].msg_hdr, hardware), t_user) : -1;
        Py_XDECREF(ip);
        if (r < 0) {
            Py_CLEAR(finished);
        }
    }
    PyMem_Free(b);
    if (finished == NULL || others == NULL) {
        Py_XDECREF(finished);
        Py_XDECREF(others);
        return NULL;
    }
    return Py_BuildValue("(NN)", finished, others);
}

/* The TX timestamp ts (-1: none) of the send keyed ``key``: the probe's t2 when ``sent`` maps the key to
 * ("probe", seq), taken out of ``sent``. Returns 1 when handled, 0 when the caller should list it, -1 with
 * an exception. */
static int on_tx(PyObject *pending, PyObject *sent, unsigned key, long long ts) {
    PyObject *k = PyLong_FromUnsignedLong(key);
    if (k == NULL) return -1;
    int r = 0;
    PyObject *ref = PyDict_GetItemWithError(sent, k); /* borrowed */
    if (ref == NULL) {
        r = PyErr_Occurred() ? -1 : 0;
    } else if (PyTuple_Check(ref) && PyTuple_GET_SIZE(ref) == 2 &&
               PyUnicode_Check(PyTuple_GET_ITEM(ref, 0)) &&
               PyUnicode_Compare(PyTuple_GET_ITEM(ref, 0), s_probe) == 0) {
        PyObject *seq = PyTuple_GET_ITEM(ref, 1);
        Py_INCREF(seq);
        r = PyDict_DelItem(sent, k) < 0 ? -1 : 1;
        if (r == 1 && ts >= 0) {
            PyObject *p = PyDict_GetItemWithError(pending, seq);
            if (p != NULL)
                r = set_ns(p, s_t2, ts) < 0 ? -1 : 1;
            else if (PyErr_Occurred())
                r = -1;
        }
        Py_DECREF(seq);
    }
    Py_DECREF(k);
    return r;
}

static PyObject *prober_err(PyObject *self, PyObject *args) {
    int fd, n, hardware;
    PyObject *pending, *sent, *early;
    if (!PyArg_ParseTuple(args, "ipO!O!", &fd, &hardware, &PyDict_Type, &pending, &PyDict_Type, &sent))
        return NULL;
    RecvBuffers *b = recv_start(fd, MSG_ERRQUEUE, &n, &early);
    if (b == NULL) {
        if (early == NULL) return NULL;
        return Py_BuildValue("(iN)", 0, early);
    }
    int kept = 0;
    PyObject *others = PyList_New(0);
    for (int i = 0; others && i < n; i++) {
        struct sock_extended_err ee;
        struct cmsghdr *c = err_cmsg(b, i, &ee);
        if (c == NULL) continue;
        kept++;
        int r = 0;
        if (ee.ee_origin == SO_EE_ORIGIN_TIMESTAMPING)
            r = on_tx(pending, sent, (unsigned)ee.ee_data, timestamp_of(&b->msgs[i].msg_hdr, hardware));
        if (r < 0) {
            Py_CLEAR(others);
        } else if (r == 0) {
            others = append_steal(others, err_item(b, i, c, &ee, hardware));
        }
    }
    PyMem_Free(b);
    if (others == NULL) return NULL;
    return Py_BuildValue("(iN)", kept, others);
}


/* ---- the responder's side: admission, the reply budget, ACK1, ACK2 and trace replies --------------- */

#define RING 16 /* one-second buckets a source keeps: window_s must be below it */
#define KIND_PROBE 1
#define KIND_TRACE 4
#define KIND_TRACE_REPLY 5
#define PAYLOAD 50
#define MAX_REVERSE_FLOWS 4096

typedef struct {
    double sec, in, out;
} Bucket;

typedef struct {
    double tokens, last;   /* the token bucket (TokenBucket); last 0: never used */
    Bucket ring[RING];     /* the reply budget's buckets (ReplyBudget), oldest at head */
    int head, count;
    double sum_in, sum_out;
    int prev, next;        /* least recently seen first (-1: none) */
    unsigned ip;           /* network order */
} Source;

/* What producers.probe_protocol's Admission (its token buckets) and ReplyBudget keep, per source address, in
 * one table of at most max_sources (the least recently seen is forgotten first): the compiled responder's. */
typedef struct {
    PyObject_HEAD
    double rate, factor, window;
    int max_sources, n, cap, oldest, newest;
    Source *src;
    PyObject *index; /* int(ip) -> position in src */
} Gate;

static void lru_unlink(Gate *g, int i) {
    Source *s = &g->src[i];
    if (s->prev >= 0) g->src[s->prev].next = s->next; else g->oldest = s->next;
    if (s->next >= 0) g->src[s->next].prev = s->prev; else g->newest = s->prev;
    s->prev = s->next = -1;
}

static void lru_push(Gate *g, int i) {
    Source *s = &g->src[i];
    s->prev = g->newest;
    s->next = -1;
    if (g->newest >= 0) g->src[g->newest].next = i; else g->oldest = i;
    g->newest = i;
}

/* The state of ip (network order), made when new, now the most recently seen; NULL with an exception. */
static Source *gate_source(Gate *g, unsigned ip) {
    PyObject *key = PyLong_FromUnsignedLong(ip);
    if (key == NULL) return NULL;
    PyObject *at = PyDict_GetItemWithError(g->index, key);
    int i;
    if (at != NULL) {
        i = (int)PyLong_AsLong(at);
        lru_unlink(g, i);
    } else if (PyErr_Occurred()) {
        Py_DECREF(key);
        return NULL;
    } else {
        if (g->n < g->max_sources) {
            if (g->n == g->cap) {
                int cap = g->cap ? g->cap * 2 : 64;
                if (cap > g->max_sources) cap = g->max_sources;
                Source *grown = PyMem_Realloc(g->src, sizeof(Source) * (size_t)cap);
                if (grown == NULL) {
                    Py_DECREF(key);
                    PyErr_NoMemory();
                    return NULL;
                }
                g->src = grown;
                g->cap = cap;
            }
            i = g->n++;
        } else { /* full: the least recently seen source is forgotten */
            i = g->oldest;
            lru_unlink(g, i);
            PyObject *old = PyLong_FromUnsignedLong(g->src[i].ip);
            if (old == NULL || PyDict_DelItem(g->index, old) < 0) {
                Py_XDECREF(old);
                Py_DECREF(key);
                return NULL;
            }
            Py_DECREF(old);
        }
        PyObject *pos = PyLong_FromLong(i);
        if (pos == NULL || PyDict_SetItem(g->index, key, pos) < 0) {
            Py_XDECREF(pos);
            Py_DECREF(key);
            return NULL;
        }
        Py_DECREF(pos);
        memset(&g->src[i], 0, sizeof(Source));
        g->src[i].ip = ip;
    }
    Py_DECREF(key);
    lru_push(g, i);
    return &g->src[i];
}

/* ReplyBudget._state: the buckets that left the window dropped, the bucket of second int(now) last. */
static Bucket *budget_now(Gate *g, Source *s, double now) {
    while (s->count && s->ring[s->head].sec <= now - g->window) {
        s->sum_in -= s->ring[s->head].in;
        s->sum_out -= s->ring[s->head].out;
        s->head = (s->head + 1) % RING;
        s->count--;
    }
    double sec = (double)(long long)now;
    Bucket *last = s->count ? &s->ring[(s->head + s->count - 1) % RING] : NULL;
    if (last == NULL || last->sec != sec) {
        if (s->count == RING) { /* cannot happen while window < RING; keeps the ring whole if it did */
            s->sum_in -= s->ring[s->head].in;
            s->sum_out -= s->ring[s->head].out;
            s->head = (s->head + 1) % RING;
            s->count--;
        }
        last = &s->ring[(s->head + s->count) % RING];
        last->sec = sec;
        last->in = last->out = 0.0;
        s->count++;
    }
    return last;
}

static int gate_received(Gate *g, unsigned ip, double n, double now) {
    Source *s = gate_source(g, ip);
    if (s == NULL) return -1;
    budget_now(g, s, now)->in += n;
    s->sum_in += n;
    return 0;
}

/* 1: n more bytes to ip are within the budget (and counted as sent), 0: not, -1: an exception. */
static int gate_allow(Gate *g, unsigned ip, double n, double now) {
    Source *s = gate_source(g, ip);
    if (s == NULL) return -1;
    Bucket *b = budget_now(g, s, now);
    if (s->sum_out + n > g->factor * s->sum_in) return 0;
    b->out += n;
    s->sum_out += n;
    return 1;
}

/* TokenBucket.take with rate = burst = the gate's rate: 1 taken, 0 not, -1 an exception. */
static int gate_take(Gate *g, unsigned ip, double now) {
    Source *s = gate_source(g, ip);
    if (s == NULL) return -1;
    if (s->last != 0.0) {
        double t = s->tokens + (now - s->last) * g->rate;
        s->tokens = t < g->rate ? t : g->rate;
    } else {
        s->tokens = g->rate;
    }
    s->last = now;
    if (s->tokens >= 1.0) {
        s->tokens -= 1.0;
        return 1;
    }
    return 0;
}

static int parse_ip(PyObject *o, unsigned *ip) {
    const char *text = PyUnicode_AsUTF8(o);
    if (text == NULL) return -1;
    struct in_addr a;
    if (inet_pton(AF_INET, text, &a) != 1) {
        PyErr_Format(PyExc_ValueError, "%s is not an IPv4 address", text);
        return -1;
    }
    *ip = a.s_addr;
    return 0;
}

static PyObject *Gate_new(PyTypeObject *type, PyObject *args, PyObject *kw) {
    static char *names[] = {"rate_limit", "factor", "window_s", "max_sources", NULL};
    double rate, factor = 2.0, window = 10.0;
    int max_sources = 65536;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "d|ddi", names, &rate, &factor, &window, &max_sources)) return NULL;
    if (window <= 0 || window >= RING || max_sources < 1)
        return PyErr_Format(PyExc_ValueError, "Gate: window_s must be in (0, %d) and max_sources >= 1", RING);
    Gate *g = (Gate *)type->tp_alloc(type, 0);
    if (g == NULL) return NULL;
    g->rate = rate;
    g->factor = factor;
    g->window = window;
    g->max_sources = max_sources;
    g->oldest = g->newest = -1;
    g->index = PyDict_New();
    if (g->index == NULL) {
        Py_DECREF(g);
        return NULL;
    }
    return (PyObject *)g;
}

static void Gate_dealloc(Gate *g) {
    Py_XDECREF(g->index);
    PyMem_Free(g->src);
    Py_TYPE(g)->tp_free((PyObject *)g);
}

static PyObject *Gate_received(Gate *g, PyObject *args) {
    PyObject *src;
    double n, now;
    unsigned ip;
    if (!PyArg_ParseTuple(args, "Udd", &src, &n, &now) || parse_ip(src, &ip) < 0) return NULL;
    if (gate_received(g, ip, n, now) < 0) return NULL;
    Py_RETURN_NONE;
}

static PyObject *Gate_allow(Gate *g, PyObject *args) {
    PyObject *dst;
    double n, now;
    unsigned ip;
    if (!PyArg_ParseTuple(args, "Udd", &dst, &n, &now) || parse_ip(dst, &ip) < 0) return NULL;
    int r = gate_allow(g, ip, n, now);
    return r < 0 ? NULL : PyBool_FromLong(r);
}

static PyObject *Gate_take(Gate *g, PyObject *args) {
    PyObject *src;
    double now;
    unsigned ip;
    if (!PyArg_ParseTuple(args, "Ud", &src, &now) || parse_ip(src, &ip) < 0) return NULL;
    int r = gate_take(g, ip, now);
    return r < 0 ? NULL : PyBool_FromLong(r);
}

static Py_ssize_t Gate_len(Gate *g) { return g->n; }

static PyMethodDef Gate_methods[] = {
    {"received", (PyCFunction)Gate_received, METH_VARARGS,
     "received(src, nbytes, now): nbytes came from src at now (monotonic s), as ReplyBudget.received"},
    {"allow", (PyCFunction)Gate_allow, METH_VARARGS,
     "allow(dst, nbytes, now) -> whether nbytes more to dst stay within the budget (then counted), as ReplyBudget.allow"},
    {"take", (PyCFunction)Gate_take, METH_VARARGS,
     "take(src, now) -> whether src's token bucket had a token (then taken), as TokenBucket.take"},
    {NULL, NULL, 0, NULL},
};

static PySequenceMethods Gate_sequence = {.sq_length = (lenfunc)Gate_len};

static PyTypeObject GateType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "producers._udpbatch.Gate",
    .tp_basicsize = sizeof(Gate),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Gate(rate_limit, factor=2.0, window_s=10.0, max_sources=65536): the compiled responder's token "
              "buckets and reply budget per source address (len: sources kept)",
    .tp_new = Gate_new,
    .tp_dealloc = (destructor)Gate_dealloc,
    .tp_methods = Gate_methods,
    .tp_as_sequence = &Gate_sequence,
};

static double mono_s(long long *ns) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    *ns = (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
    return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

static void put_be(unsigned char *p, unsigned long long v, int bytes) {
    for (int k = bytes - 1; k >= 0; k--, v >>= 8) p[k] = (unsigned char)(v & 0xFF);
}

/* A 50-byte payload of producers/udp_wire.py. */
static void wire(unsigned char *out, int kind, unsigned long long seq, unsigned qpn, unsigned prober_qpn,
                 long long t3, long long t4, int hardware) {
    memset(out, 0, PAYLOAD);
    out[0] = 'F';
    out[1] = 'S';
    out[2] = 1;
    out[3] = (unsigned char)kind;
    put_be(out + 4, seq, 8);
    put_be(out + 12, qpn, 4);
    put_be(out + 16, prober_qpn, 4);
    put_be(out + 20, (unsigned long long)t3, 8);
    put_be(out + 28, (unsigned long long)t4, 8);
    out[36] = (unsigned char)(hardware != 0);
}

typedef struct {
    unsigned char payload[PAYLOAD];
    struct sockaddr_in to;
    PyObject *ref; /* owned; NULL: no TX timestamp wanted */
} Reply;

typedef struct {
    Reply r[BATCH];
    int n;
} Replies;

static int count(PyObject *counters, const char *name) {
    PyObject *v = PyDict_GetItemString(counters, name);
    long long n = v ? PyLong_AsLongLong(v) : 0;
    if (n == -1 && PyErr_Occurred()) return -1;
    PyObject *o = PyLong_FromLongLong(n + 1);
    if (o == NULL) return -1;
    int r = PyDict_SetItemString(counters, name, o);
    Py_DECREF(o);
    return r;
}

#define TS_CTRL (CMSG_SPACE(sizeof(int)) * 2)

/* The control messages of a send that wants its TX timestamp under ``key`` (SCM_TS_OPT_ID, SO_TIMESTAMPING with
 * tx_flags) into ctrl (TS_CTRL bytes, zeroed). */
static void ts_cmsgs(char *ctrl, int key, int tx_flags) {
    struct {
        int type, value;
    } opts[2] = {{SCM_TS_OPT_ID_, key}, {SO_TIMESTAMPING, tx_flags}};
    for (int k = 0; k < 2; k++) {
        struct cmsghdr *c = (struct cmsghdr *)(ctrl + k * CMSG_SPACE(sizeof(int)));
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = opts[k].type;
        c->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(c), &opts[k].value, sizeof(int));
    }
}

/* Send the replies (one sendmmsg; a reply with a ref asks for its TX timestamp under key next_key + i and is
 * remembered in ``sent``); returns the new next_key, and lists the replies the kernel refused, and those after
 * them, in ``unsent`` as (payload, (ip, port), ref | None) for the engine's own send path. -1 with an exception. */
static long long send_replies(int fd, Replies *q, PyObject *sent, long long next_key, int tx_flags, PyObject *unsent) {
    struct mmsghdr msgs[BATCH];
    struct iovec iov[BATCH];
    char ctrl[BATCH][TS_CTRL];
    memset(msgs, 0, sizeof(msgs));
    memset(ctrl, 0, sizeof(ctrl));
    for (int i = 0; i < q->n; i++) {
        iov[i].iov_base = q->r[i].payload;
        iov[i].iov_len = PAYLOAD;
        struct msghdr *h = &msgs[i].msg_hdr;
        h->msg_name = &q->r[i].to;
        h->msg_namelen = sizeof(q->r[i].to);
        h->msg_iov = &iov[i];
        h->msg_iovlen = 1;
        if (q->r[i].ref != NULL) {
            ts_cmsgs(ctrl[i], (int)(unsigned)((next_key + i) & 0xFFFFFFFFLL), tx_flags);
            h->msg_control = ctrl[i];
            h->msg_controllen = TS_CTRL;
        }
    }
    int n = 0;
    if (q->n) {
        Py_BEGIN_ALLOW_THREADS
        n = sendmmsg(fd, msgs, (unsigned)q->n, MSG_DONTWAIT);
        Py_END_ALLOW_THREADS
        if (n < 0) n = 0;
    }
    int failed = 0;
    for (int i = 0; i < q->n; i++) {
        Reply *r = &q->r[i];
        if (!failed && i < n && r->ref != NULL) {
            PyObject *key = PyLong_FromLongLong((next_key + i) & 0xFFFFFFFFLL);
            if (key == NULL || PyDict_SetItem(sent, key, r->ref) < 0) failed = 1;
            Py_XDECREF(key);
        } else if (!failed && i >= n) {
            char ip[INET_ADDRSTRLEN];
            inet_ntop(AF_INET, &r->to.sin_addr, ip, sizeof(ip));
            PyObject *item = Py_BuildValue("(y#(si)O)", (const char *)r->payload, (Py_ssize_t)PAYLOAD, ip,
                                           (int)ntohs(r->to.sin_port), r->ref ? r->ref : Py_None);
            if (item == NULL || PyList_Append(unsent, item) < 0) failed = 1;
            Py_XDECREF(item);
        }
        Py_XDECREF(r->ref);
        r->ref = NULL;
    }
    q->n = 0;
    return failed ? -1 : next_key + n;
}

static Reply *reply_to(Replies *q, struct sockaddr_in *to) {
    Reply *r = &q->r[q->n++];
    r->to = *to;
    r->ref = NULL;
    return r;
}

/* Whether ``src`` (str) is in set ``s``: 1, 0, -1 with an exception. */
static int in_set(PyObject *s, PyObject *src) { return PySet_Check(s) ? PySet_Contains(s, src) : 0; }

/* The admission of a packet from src (UdpEngine's rule): registered, and within its token bucket. */
static int admit(Gate *g, PyObject *allowed, PyObject *counters, PyObject *src, unsigned ip, double now) {
    int r = in_set(allowed, src);
    if (r <= 0) return r < 0 ? -1 : (count(counters, "dropped_unregistered") < 0 ? -1 : 0);
    r = gate_take(g, ip, now);
    if (r == 0) return count(counters, "dropped_rate") < 0 ? -1 : 0;
    return r;
}

/* One PROBE or TRACE datagram d from ``from`` (src its address as str): the steps of UdpEngine._on_packet. */
static int on_request(Gate *g, PyObject *a, const unsigned char *d, struct sockaddr_in *from, PyObject *src,
                      long long t_rx, long long t_user, double now, long long now_ns, Replies *q) {
    /* a: (qpn, allowed, reverse_peers, counters, reverse_seen, local_ip, local_port) */
    PyObject *qpn_o = PyTuple_GET_ITEM(a, 0), *allowed = PyTuple_GET_ITEM(a, 1), *peers = PyTuple_GET_ITEM(a, 2);
    PyObject *counters = PyTuple_GET_ITEM(a, 3), *seen = PyTuple_GET_ITEM(a, 4);
    unsigned qpn = (unsigned)PyLong_AsUnsignedLong(qpn_o);
    int kind = d[3];
    unsigned long long seq = be64(d + 4);
    unsigned pkt_qpn = be32(d + 12), prober_qpn = be32(d + 16);
    int r = admit(g, allowed, counters, src, from->sin_addr.s_addr, now);
    if (r <= 0) return r;
    if (kind == KIND_PROBE) {
        if (pkt_qpn != qpn) return count(counters, "dropped_stale_qpn");
        r = gate_allow(g, from->sin_addr.s_addr, 2 * PAYLOAD, now); /* ACK1 and ACK2 */
        if (r <= 0) return r < 0 ? -1 : count(counters, "dropped_budget");
        long long t3 = t_rx >= 0 ? t_rx : t_user;
        Reply *rep = reply_to(q, from);
        wire(rep->payload, KIND_ACK1, seq, qpn, prober_qpn, 0, 0, 0);
        rep->ref = Py_BuildValue("(s((Oi)KLI))", "ack1", src, (int)ntohs(from->sin_port), seq, t3, prober_qpn);
        if (rep->ref == NULL || count(counters, "answered") < 0) return -1;
        r = in_set(peers, src);
        if (r <= 0) return r;
        PyObject *flow = Py_BuildValue("(OOOi)", PyTuple_GET_ITEM(a, 5), PyTuple_GET_ITEM(a, 6), src,
                                       (int)ntohs(from->sin_port));
        if (flow == NULL) return -1;
        r = PyDict_Contains(seen, flow);
        if (r >= 0 && (r == 1 || PyDict_GET_SIZE(seen) < MAX_REVERSE_FLOWS)) {
            PyObject *at = PyLong_FromLongLong(now_ns);
            r = at == NULL ? -1 : PyDict_SetItem(seen, flow, at);
            Py_XDECREF(at);
        }
        Py_DECREF(flow);
        return r < 0 ? -1 : 0;
    }
    r = gate_allow(g, from->sin_addr.s_addr, PAYLOAD, now);
    if (r <= 0) return r < 0 ? -1 : count(counters, "dropped_budget");
    /* QPN 0: a trace reply tells nothing a sender without the responder's QPN should learn */
    wire(reply_to(q, from)->payload, KIND_TRACE_REPLY, seq, 0, 0, 0, 0, 0);
    return 0;
}

static PyObject *responder_rx(PyObject *self, PyObject *args) {
    int fd, n, hardware, tx_flags;
    long long next_key;
    Gate *g;
    PyObject *a, *sent, *early;
    if (!PyArg_ParseTuple(args, "ipO!O!O!Li", &fd, &hardware, &GateType, &g, &PyTuple_Type, &a, &PyDict_Type,
                          &sent, &next_key, &tx_flags))
        return NULL;
    if (PyTuple_GET_SIZE(a) != 7 || !PyDict_Check(PyTuple_GET_ITEM(a, 3)) || !PyDict_Check(PyTuple_GET_ITEM(a, 4)))
        return PyErr_Format(PyExc_TypeError, "responder_rx: (qpn, allowed, reverse_peers, counters, reverse_seen, "
                                             "local_ip, local_port) expected");
    RecvBuffers *b = recv_start(fd, 0, &n, &early);
    if (b == NULL) {
        if (early == NULL) return NULL;
        return Py_BuildValue("(LNN)", next_key, early, PyList_New(0));
    }
    long long t_user = now_ns(), mono_ns;
    double now = mono_s(&mono_ns);
    Replies *q = PyMem_Calloc(1, sizeof(Replies));
    PyObject *others = PyList_New(0), *unsent = PyList_New(0);
    int failed = q == NULL || others == NULL || unsent == NULL;
    PyObject *allowed = PyTuple_GET_ITEM(a, 1), *peers = PyTuple_GET_ITEM(a, 2);
    for (int i = 0; !failed && i < n; i++) {
        const unsigned char *d = (const unsigned char *)b->data[i];
        unsigned len = msg_len(b, i);
        if (len < WIRE_HEAD || d[0] != 'F' || d[1] != 'S' || d[2] != 1 || d[3] < KIND_PROBE || d[3] > KIND_TRACE_REPLY)
            continue; /* not ours: nothing to count or answer */
        PyObject *src = ip_str(b->addrs[i].sin_addr);
        if (src == NULL) {
            failed = 1;
            break;
        }
        int asks = d[3] == KIND_PROBE || d[3] == KIND_TRACE; /* what it brings in is what replies may send */
        int known = asks ? in_set(allowed, src) : 0;
        if (known == 0 && asks) known = in_set(peers, src);
        if (known < 0 || (known && gate_received(g, b->addrs[i].sin_addr.s_addr, len, now) < 0)) {
            failed = 1;
        } else if (asks) {
            failed = on_request(g, a, d, &b->addrs[i], src, timestamp_of(&b->msgs[i].msg_hdr, hardware), t_user,
                                now, mono_ns, q) < 0;
        } else { /* a reply (trace replies of the reverse traces): the engine's steps */
            PyObject *item = rx_item(b, i, hardware);
            failed = item == NULL || PyList_Append(others, item) < 0;
            Py_XDECREF(item);
        }
        Py_DECREF(src);
        if (!failed && q->n == BATCH) {
            next_key = send_replies(fd, q, sent, next_key, tx_flags, unsent);
            failed = next_key < 0;
        }
    }
    PyMem_Free(b);
    if (!failed) {
        next_key = send_replies(fd, q, sent, next_key, tx_flags, unsent);
        failed = next_key < 0;
    } else if (q != NULL) {
        for (int i = 0; i < q->n; i++) Py_XDECREF(q->r[i].ref);
    }
    PyMem_Free(q);
    if (failed) {
        Py_XDECREF(others);
        Py_XDECREF(unsent);
        return PyErr_Occurred() ? NULL : PyErr_NoMemory();
    }
    return Py_BuildValue("(LNN)", next_key, others, unsent);
}

static PyObject *responder_err(PyObject *self, PyObject *args) {
    int fd, n, hardware;
    unsigned qpn;
    PyObject *sent, *early;
    if (!PyArg_ParseTuple(args, "ipIO!", &fd, &hardware, &qpn, &PyDict_Type, &sent)) return NULL;
    RecvBuffers *b = recv_start(fd, MSG_ERRQUEUE, &n, &early);
    if (b == NULL) {
        if (early == NULL) return NULL;
        return Py_BuildValue("(iNN)", 0, early, PyList_New(0));
    }
    int kept = 0, failed = 0;
    Replies *q = PyMem_Calloc(1, sizeof(Replies));
    PyObject *others = PyList_New(0), *unsent = PyList_New(0);
    failed = q == NULL || others == NULL || unsent == NULL;
    for (int i = 0; !failed && i < n; i++) {
        struct sock_extended_err ee;
        struct cmsghdr *c = err_cmsg(b, i, &ee);
        if (c == NULL) continue;
        kept++;
        long long ts = timestamp_of(&b->msgs[i].msg_hdr, hardware);
        PyObject *ref = NULL;
        if (ee.ee_origin == SO_EE_ORIGIN_TIMESTAMPING) {
            PyObject *key = PyLong_FromUnsignedLong((unsigned)ee.ee_data);
            ref = key ? PyDict_GetItemWithError(sent, key) : NULL;
            Py_XINCREF(ref);
            if (ref != NULL && PyDict_DelItem(sent, key) < 0) failed = 1;
            Py_XDECREF(key);
            if (PyErr_Occurred()) failed = 1;
        }
        /* ("ack1", ((ip, port), seq, t3, prober_qpn)): ACK2 carries t3 and ACK1's TX time t4 */
        PyObject *ip_o, *data;
        unsigned long long seq;
        long long t3;
        unsigned pqpn;
        int port;
        if (!failed && ref != NULL && PyTuple_Check(ref) && PyTuple_GET_SIZE(ref) == 2 &&
                   PyUnicode_Check(PyTuple_GET_ITEM(ref, 0)) &&
                   PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(ref, 0), "ack1") == 0 &&
                   (data = PyTuple_GET_ITEM(ref, 1)) != NULL &&
                   PyArg_ParseTuple(data, "(Ui)KLI", &ip_o, &port, &seq, &t3, &pqpn)) {
            if (ts >= 0) {
                struct sockaddr_in to;
                memset(&to, 0, sizeof(to));
                to.sin_family = AF_INET;
                to.sin_port = htons((unsigned short)port);
                unsigned ip;
                if (parse_ip(ip_o, &ip) < 0) {
                    failed = 1;
                } else {
                    to.sin_addr.s_addr = ip;
                    wire(reply_to(q, &to)->payload, KIND_ACK2, seq, qpn, pqpn, t3, ts, hardware);
                }
            }
        } else if (!failed && ref != NULL) { /* not an ACK1's: the engine's steps decide */
            PyErr_Clear();
            PyObject *item = err_item(b, i, c, &ee, hardware);
            failed = item == NULL || PyList_Append(others, item) < 0;
            Py_XDECREF(item);
            if (!failed) { /* put the key back for the engine's steps, which pop it */
                PyObject *key = PyLong_FromUnsignedLong((unsigned)ee.ee_data);
                failed = key == NULL || PyDict_SetItem(sent, key, ref) < 0;
                Py_XDECREF(key);
            }
        } else if (!failed && ee.ee_origin != SO_EE_ORIGIN_TIMESTAMPING) { /* an ICMP error */
            PyObject *item = err_item(b, i, c, &ee, hardware);
            failed = item == NULL || PyList_Append(others, item) < 0;
            Py_XDECREF(item);
        }
        Py_XDECREF(ref);
        if (!failed && q->n == BATCH) failed = send_replies(fd, q, sent, 0, 0, unsent) < 0;
    }
    PyMem_Free(b);
    if (!failed) failed = send_replies(fd, q, sent, 0, 0, unsent) < 0;
    PyMem_Free(q);
    if (failed) {
        Py_XDECREF(others);
        Py_XDECREF(unsent);
        return PyErr_Occurred() ? NULL : PyErr_NoMemory();
    }
    return Py_BuildValue("(iNN)", kept, others, unsent);
}


/* send_probes([(fd, seq, qpn, prober_qpn, ip, port, key, tx_flags, probe, sent), ...]) -> how many were sent, in
 * order: one sendmsg each (every probe has a socket, its 5-tuple, of its own) of the probe's payload (built here, as
 * udp_wire.encode(PROBE, seq, qpn, prober_qpn) builds it), each asking for its TX timestamp under ``key``, which
 * ``sent`` then maps to ("probe", seq); the probe's t1 is the realtime clock read just before its send. Stops at
 * the first the kernel refuses (the caller sends that one alone, to retry once and learn why). */
static PyObject *send_probes(PyObject *self, PyObject *args) {
    PyObject *items;
    if (!PyArg_ParseTuple(args, "O!", &PyList_Type, &items)) return NULL;
    Py_ssize_t total = PyList_GET_SIZE(items), done = 0;
    for (; done < total; done++) {
        const char *ip;
        int fd, port, tx_flags;
        unsigned long long seq;
        unsigned qpn, prober_qpn;
        long long key;
        PyObject *probe, *sent;
        if (!PyArg_ParseTuple(PyList_GET_ITEM(items, done), "iKIIsiLiOO!", &fd, &seq, &qpn, &prober_qpn, &ip, &port,
                              &key, &tx_flags, &probe, &PyDict_Type, &sent))
            return NULL;
        struct sockaddr_in to;
        memset(&to, 0, sizeof(to));
        to.sin_family = AF_INET;
        to.sin_port = htons((unsigned short)port);
        if (inet_pton(AF_INET, ip, &to.sin_addr) != 1)
            return PyErr_Format(PyExc_ValueError, "send_probes: %s is not an IPv4 address", ip);
        unsigned char payload[PAYLOAD];
        wire(payload, KIND_PROBE, seq, qpn, prober_qpn, 0, 0, 0);
        struct iovec iov = {payload, PAYLOAD};
        char ctrl[TS_CTRL];
        memset(ctrl, 0, sizeof(ctrl));
        ts_cmsgs(ctrl, (int)(unsigned)key, tx_flags);
        struct msghdr h = {&to, sizeof(to), &iov, 1, ctrl, sizeof(ctrl), 0};
        long long t1 = now_ns();
        ssize_t n;
        Py_BEGIN_ALLOW_THREADS
        n = sendmsg(fd, &h, MSG_DONTWAIT);
        Py_END_ALLOW_THREADS
        if (n < 0) break;
        if (set_ns(probe, s_t1, t1) < 0) return NULL;
        PyObject *k = PyLong_FromUnsignedLong((unsigned long)(key & 0xFFFFFFFF));
        PyObject *ref = Py_BuildValue("(OK)", s_probe, seq);
        int r = k && ref ? PyDict_SetItem(sent, k, ref) : -1;
        Py_XDECREF(k);
        Py_XDECREF(ref);
        if (r < 0) return NULL;
    }
    return PyLong_FromSsize_t(done);
}

/* ---- one wakeup's ready sockets in one call (see the top of the file) -------------------------------- */

#define EV_IN 0x001  /* EPOLLIN */
#define EV_ERR 0x008 /* EPOLLERR */
#define HANDLER_PROBER 0
#define HANDLER_RESPONDER 1
#define LEFT_EVENT 0 /* (0, fd, mask, None, None): a socket the table does not hold; the engine's own steps */
#define LEFT_ERR 1   /* (1, fd, kept, others, unsent): error-queue entries the engine's steps take */
#define LEFT_RX 2    /* (2, fd, others, unsent, None): datagrams and unsent replies the engine's steps take */
#define LEFT_TRIM 3  /* (3, fd, None, None, None): the endpoint's ``sent`` outgrew its bound */
#define SENT_BOUND 4096

/* Append (kind, fd, a, b, c) to ``left``, stealing a, b and c (NULL: None). Returns 0, or -1 with an exception. */
static int leave(PyObject *left, int kind, int fd, PyObject *a, PyObject *b, PyObject *c) {
    PyObject *t = Py_BuildValue("(iiNNN)", kind, fd, a ? a : Py_NewRef(Py_None), b ? b : Py_NewRef(Py_None),
                                c ? c : Py_NewRef(Py_None));
    if (t == NULL) return -1;
    int r = PyList_Append(left, t);
    Py_DECREF(t);
    return r;
}

/* f(args) for one of this module's calls, args stolen (NULL: the exception of building them). */
static PyObject *call(PyCFunction f, PyObject *args) {
    if (args == NULL) return NULL;
    PyObject *r = f(NULL, args);
    Py_DECREF(args);
    return r;
}

/* A call's NULL result: an OSError (a pending socket error surfacing, as in the engine's own steps) is cleared
 * and 1 returned; any other exception stays, -1. */
static int os_error(void) {
    if (!PyErr_ExceptionMatches(PyExc_OSError)) return -1;
    PyErr_Clear();
    return 1;
}

/* An error-queue call's result r (stolen; NULL: its exception) for socket fd: left to the engine's steps when
 * something is (an entry it did not take, a reply it could not send, or no entry at all: a pending socket
 * error to clear). r is (kept, others) or (kept, others, unsent). Returns 0, or -1 with an exception. */
static int err_result(PyObject *left, int fd, PyObject *r) {
    if (r == NULL) {
        if (os_error() < 0) return -1;
        return leave(left, LEFT_ERR, fd, PyLong_FromLong(0), PyList_New(0), PyList_New(0));
    }
    PyObject *kept = PyTuple_GET_ITEM(r, 0), *others = PyTuple_GET_ITEM(r, 1);
    PyObject *unsent = PyTuple_GET_SIZE(r) > 2 ? PyTuple_GET_ITEM(r, 2) : NULL;
    int rc = 0;
    if (PyLong_AsLong(kept) == 0 || PyList_GET_SIZE(others) || (unsent && PyList_GET_SIZE(unsent)))
        rc = leave(left, LEFT_ERR, fd, Py_NewRef(kept), Py_NewRef(others), unsent ? Py_NewRef(unsent) : PyList_New(0));
    Py_DECREF(r);
    return rc;
}

/* One prober socket's event: its TX timestamps, then its ACKs. Returns 0, or -1 with an exception. */
static int prober_event(int fd, int mask, int hardware, PyObject *sent, PyObject *pending, PyObject *finished,
                        PyObject *left) {
    if ((mask & EV_ERR) &&
        err_result(left, fd, call(prober_err, Py_BuildValue("(iiOO)", fd, hardware, pending, sent))) < 0)
        return -1;
    if (mask & EV_IN) {
        PyObject *r = call(prober_rx, Py_BuildValue("(iiO)", fd, hardware, pending));
        if (r == NULL) return os_error() < 0 ? -1 : 0;
        PyObject *done = PyTuple_GET_ITEM(r, 0), *others = PyTuple_GET_ITEM(r, 1);
        int rc = PyList_SetSlice(finished, PY_SSIZE_T_MAX, PY_SSIZE_T_MAX, done);
        if (rc == 0 && PyList_GET_SIZE(others)) rc = leave(left, LEFT_RX, fd, Py_NewRef(others), PyList_New(0), NULL);
        Py_DECREF(r);
        if (rc < 0) return -1;
    }
    return 0;
}

/* One responder socket's event: its ACK1s' TX timestamps (ACK2s sent), then its requests (ACK1s sent).
 * h = (1, hardware, endpoint, qpn, local_ip, local_port, sent, tx_flags); shared = (allowed, reverse_peers,
 * counters, reverse_seen). Returns 0, or -1 with an exception. */
static int responder_event(int fd, int mask, PyObject *h, PyObject *gate, PyObject *shared, PyObject *left) {
    int hardware = PyObject_IsTrue(PyTuple_GET_ITEM(h, 1));
    PyObject *ep = PyTuple_GET_ITEM(h, 2), *qpn = PyTuple_GET_ITEM(h, 3), *sent = PyTuple_GET_ITEM(h, 6);
    if ((mask & EV_ERR) &&
        err_result(left, fd, call(responder_err, Py_BuildValue("(iiOO)", fd, hardware, qpn, sent))) < 0)
        return -1;
    if (mask & EV_IN) {
        PyObject *key = PyObject_GetAttrString(ep, "next_key");
        if (key == NULL) return -1;
        PyObject *ctx = Py_BuildValue("(OOOOOOO)", qpn, PyTuple_GET_ITEM(shared, 0), PyTuple_GET_ITEM(shared, 1),
                                      PyTuple_GET_ITEM(shared, 2), PyTuple_GET_ITEM(shared, 3), PyTuple_GET_ITEM(h, 4),
                                      PyTuple_GET_ITEM(h, 5));
        PyObject *r = ctx ? call(responder_rx, Py_BuildValue("(iiOOOOO)", fd, hardware, gate, ctx, sent, key,
                                                             PyTuple_GET_ITEM(h, 7)))
                          : NULL;
        Py_XDECREF(ctx);
        Py_DECREF(key);
        if (r == NULL) return os_error() < 0 ? -1 : 0;
        PyObject *others = PyTuple_GET_ITEM(r, 1), *unsent = PyTuple_GET_ITEM(r, 2);
        int rc = PyObject_SetAttrString(ep, "next_key", PyTuple_GET_ITEM(r, 0));
        if (rc == 0 && (PyList_GET_SIZE(others) || PyList_GET_SIZE(unsent)))
            rc = leave(left, LEFT_RX, fd, Py_NewRef(others), Py_NewRef(unsent), NULL);
        Py_DECREF(r);
        if (rc < 0) return -1;
    }
    if (PyDict_Size(sent) > SENT_BOUND) return leave(left, LEFT_TRIM, fd, NULL, NULL, NULL);
    return 0;
}

static PyObject *dispatch(PyObject *self, PyObject *args) {
    PyObject *events, *table, *pending, *gate, *shared;
    if (!PyArg_ParseTuple(args, "O!O!O!OO!", &PyList_Type, &events, &PyDict_Type, &table, &PyDict_Type, &pending,
                          &gate, &PyTuple_Type, &shared))
        return NULL;
    if (PyTuple_GET_SIZE(shared) != 4) return PyErr_Format(PyExc_TypeError, "dispatch: shared is 4 items");
    PyObject *finished = PyList_New(0), *left = PyList_New(0);
    int failed = finished == NULL || left == NULL;
    for (Py_ssize_t i = 0; !failed && i < PyList_GET_SIZE(events); i++) {
        int fd, mask;
        if (!PyArg_ParseTuple(PyList_GET_ITEM(events, i), "ii", &fd, &mask)) {
            failed = 1;
            break;
        }
        PyObject *fd_o = PyLong_FromLong(fd);
        PyObject *h = fd_o ? PyDict_GetItemWithError(table, fd_o) : NULL; /* borrowed */
        Py_XDECREF(fd_o);
        if (h == NULL) {
            failed = PyErr_Occurred() || leave(left, LEFT_EVENT, fd, PyLong_FromLong(mask), NULL, NULL) < 0;
        } else if (!PyTuple_Check(h) || PyTuple_GET_SIZE(h) < 3) {
            PyErr_SetString(PyExc_TypeError, "dispatch: a handler is (0, hardware, sent) or (1, hardware, ...)");
            failed = 1;
        } else if (PyLong_AsLong(PyTuple_GET_ITEM(h, 0)) == HANDLER_PROBER) {
            failed = prober_event(fd, mask, PyObject_IsTrue(PyTuple_GET_ITEM(h, 1)), PyTuple_GET_ITEM(h, 2), pending,
                                  finished, left) < 0;
        } else if (PyTuple_GET_SIZE(h) == 8) {
            failed = responder_event(fd, mask, h, gate, shared, left) < 0;
        } else {
            PyErr_SetString(PyExc_TypeError, "dispatch: a responder's handler is 8 items");
            failed = 1;
        }
    }
    if (failed) {
        Py_XDECREF(finished);
        Py_XDECREF(left);
        return PyErr_Occurred() ? NULL : PyErr_NoMemory();
    }
    return Py_BuildValue("(NN)", finished, left);
}

static PyMethodDef methods[] = {
    {"recv_rx", recv_rx, METH_VARARGS, "recv_rx(fd, hardware) -> [(payload, ip, port, t_rx_ns | None)]"},
    {"recv_err", recv_err, METH_VARARGS,
     "recv_err(fd, hardware) -> [(origin, ts_ns | None, key, icmp_type, icmp_code, offender, payload)]"},
    {"send_many", send_many, METH_VARARGS,
     "send_many(fd, [(payload, ip, port, ttl, key, tx_flags)]) -> how many were sent, in order"},
    {"send_probes", send_probes, METH_VARARGS,
     "send_probes([(fd, seq, qpn, prober_qpn, ip, port, key, tx_flags, probe, sent)]) -> how many were sent, in order "
     "(each probe's t1 set, its key in sent)"},
    {"prober_rx", prober_rx, METH_VARARGS,
     "prober_rx(fd, hardware, pending) -> (finished probes, [(payload, ip, port, t_rx_ns | None)] of the rest)"},
    {"prober_err", prober_err, METH_VARARGS,
     "prober_err(fd, hardware, pending, sent) -> (entries kept, [recv_err tuples] of the rest)"},
    {"responder_rx", responder_rx, METH_VARARGS,
     "responder_rx(fd, hardware, gate, (qpn, allowed, reverse_peers, counters, reverse_seen, local_ip, local_port), "
     "sent, next_key, tx_flags) -> (next_key, [recv_rx tuples] of the replies, [(payload, addr, ref)] unsent)"},
    {"responder_err", responder_err, METH_VARARGS,
     "responder_err(fd, hardware, qpn, sent) -> (entries kept, [recv_err tuples] of the rest, "
     "[(payload, addr, None)] unsent)"},
    {"dispatch", dispatch, METH_VARARGS,
     "dispatch(events, table, pending, gate, (allowed, reverse_peers, counters, reverse_seen)) -> (finished probes, "
     "[(kind, fd, a, b, c)] left to the engine's steps)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_udpbatch",
                                    "recvmmsg/sendmmsg with kernel timestamps for the udp agent", -1, methods};

PyMODINIT_FUNC PyInit__udpbatch(void) {
    struct {
        PyObject **name;
        const char *text;
    } names[] = {{&s_entry, "entry"}, {&s_dst_ip, "dst_ip"}, {&s_probe, "probe"}, {&s_t1, "t1"}, {&s_t2, "t2"}, {&s_t3, "t3"},
                 {&s_t4, "t4"}, {&s_t5, "t5"}, {&s_t6, "t6"}, {&s_responder_hw, "responder_hw"}};
    for (size_t k = 0; k < sizeof(names) / sizeof(names[0]); k++)
        if ((*names[k].name = PyUnicode_InternFromString(names[k].text)) == NULL) return NULL;
    if (PyType_Ready(&GateType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m && (PyModule_AddIntConstant(m, "BATCH", BATCH) < 0 || PyModule_AddObjectRef(m, "Gate", (PyObject *)&GateType) < 0)) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
