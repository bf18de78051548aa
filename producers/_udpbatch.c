/* Batched socket calls for the udp agent: recvmmsg(2) and sendmmsg(2) with kernel timestamps.
 *
 * The agent's engine (producers/udp_prober.py) reads and writes one datagram per Python call when this
 * module is absent; with it, one call reads every queued datagram of a socket (up to BATCH) and parses
 * the ancillary data in C, and one call sends a socket's queued replies. The responder's side of the
 * protocol stays in Python; the prober's commonest steps (below) are here.
 *
 * recv_rx(fd, hardware) -> [(payload: bytes, ip: str, port: int, t_rx_ns: int | None), ...]
 * recv_err(fd, hardware) -> [(origin, ts_ns | None, key, icmp_type, icmp_code, offender, payload), ...]
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
        return Py_BuildValue("(iNIiisy#)", (int)ee->ee_origin, ns_or_none(timestamp_of(&b->msgs[i].msg_hdr, hardware)),
                             (unsigned)ee->ee_data, 0, 0, "", "", (Py_ssize_t)0);
    PyObject *offender = NULL;
    if (c->cmsg_len >= CMSG_LEN(sizeof(*ee) + sizeof(struct sockaddr_in))) {
        struct sockaddr_in off;
        memcpy(&off, CMSG_DATA(c) + sizeof(*ee), sizeof(off));
        if (off.sin_family == AF_INET) offender = ip_str(off.sin_addr);
    }
    if (offender == NULL) offender = PyUnicode_FromString("");
    return Py_BuildValue("(iOIiiNy#)", (int)ee->ee_origin, Py_None, 0U, (int)ee->ee_type, (int)ee->ee_code,
                         offender, b->data[i], (Py_ssize_t)msg_len(b, i));
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

static PyObject *s_entry, *s_dst_ip, *s_probe, *s_t2, *s_t3, *s_t4, *s_t5, *s_t6, *s_responder_hw;

static unsigned long long be64(const unsigned char *p) {
    unsigned long long v = 0;
    for (int k = 0; k < 8; k++) v = (v << 8) | p[k];
    return v;
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

static PyMethodDef methods[] = {
    {"recv_rx", recv_rx, METH_VARARGS, "recv_rx(fd, hardware) -> [(payload, ip, port, t_rx_ns | None)]"},
    {"recv_err", recv_err, METH_VARARGS,
     "recv_err(fd, hardware) -> [(origin, ts_ns | None, key, icmp_type, icmp_code, offender, payload)]"},
    {"send_many", send_many, METH_VARARGS,
     "send_many(fd, [(payload, ip, port, ttl, key, tx_flags)]) -> how many were sent, in order"},
    {"prober_rx", prober_rx, METH_VARARGS,
     "prober_rx(fd, hardware, pending) -> (finished probes, [(payload, ip, port, t_rx_ns | None)] of the rest)"},
    {"prober_err", prober_err, METH_VARARGS,
     "prober_err(fd, hardware, pending, sent) -> (entries kept, [recv_err tuples] of the rest)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_udpbatch",
                                    "recvmmsg/sendmmsg with kernel timestamps for the udp agent", -1, methods};

PyMODINIT_FUNC PyInit__udpbatch(void) {
    struct {
        PyObject **name;
        const char *text;
    } names[] = {{&s_entry, "entry"}, {&s_dst_ip, "dst_ip"}, {&s_probe, "probe"}, {&s_t2, "t2"}, {&s_t3, "t3"},
                 {&s_t4, "t4"}, {&s_t5, "t5"}, {&s_t6, "t6"}, {&s_responder_hw, "responder_hw"}};
    for (size_t k = 0; k < sizeof(names) / sizeof(names[0]); k++)
        if ((*names[k].name = PyUnicode_InternFromString(names[k].text)) == NULL) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m && PyModule_AddIntConstant(m, "BATCH", BATCH) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
