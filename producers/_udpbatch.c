/* Batched socket calls for the udp agent: recvmmsg(2) and sendmmsg(2) with kernel timestamps.
 *
 * The agent's engine (producers/udp_prober.py) reads and writes one datagram per Python call when this
 * module is absent; with it, one call reads every queued datagram of a socket (up to BATCH) and parses
 * the ancillary data in C, and one call sends a socket's queued replies. The protocol stays in Python:
 * this module knows sockets, timestamps and error-queue entries, not the probe format.
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

/* Parse (fd, hardware), read the socket's queue with ``flags``; returns the buffers (caller frees) with
 * *n messages, or NULL with *early set: [] when nothing is queued, NULL (an exception) on an error. */
static RecvBuffers *recv_start(PyObject *args, int flags, int *n, int *hardware, PyObject **early) {
    int fd;
    *early = NULL;
    if (!PyArg_ParseTuple(args, "ip", &fd, hardware)) return NULL;
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

static PyObject *recv_rx(PyObject *self, PyObject *args) {
    int n, hardware;
    PyObject *early;
    RecvBuffers *b = recv_start(args, 0, &n, &hardware, &early);
    if (b == NULL) return early;
    PyObject *out = PyList_New(0);
    for (int i = 0; out && i < n; i++) {
        struct msghdr *h = &b->msgs[i].msg_hdr;
        unsigned len = b->msgs[i].msg_len < DATA ? b->msgs[i].msg_len : DATA;
        PyObject *item = Py_BuildValue("(y#NiN)", b->data[i], (Py_ssize_t)len, ip_str(b->addrs[i].sin_addr),
                                       (int)ntohs(b->addrs[i].sin_port), ns_or_none(timestamp_of(h, hardware)));
        out = append_steal(out, item);
    }
    PyMem_Free(b);
    return out;
}

static PyObject *recv_err(PyObject *self, PyObject *args) {
    int n, hardware;
    PyObject *early;
    RecvBuffers *b = recv_start(args, MSG_ERRQUEUE, &n, &hardware, &early);
    if (b == NULL) return early;
    PyObject *out = PyList_New(0);
    for (int i = 0; out && i < n; i++) {
        struct msghdr *h = &b->msgs[i].msg_hdr;
        unsigned len = b->msgs[i].msg_len < DATA ? b->msgs[i].msg_len : DATA;
        for (struct cmsghdr *c = CMSG_FIRSTHDR(h); c; c = CMSG_NXTHDR(h, c)) {
            if (c->cmsg_level != SOL_IP || c->cmsg_type != IP_RECVERR ||
                c->cmsg_len < CMSG_LEN(sizeof(struct sock_extended_err)))
                continue;
            struct sock_extended_err ee;
            memcpy(&ee, CMSG_DATA(c), sizeof(ee));
            PyObject *item = NULL;
            if (ee.ee_origin == SO_EE_ORIGIN_TIMESTAMPING) {
                if (ee.ee_info != SCM_TSTAMP_SND || ee.ee_errno != ENOMSG) break;
                item = Py_BuildValue("(iNIiisy#)", (int)ee.ee_origin, ns_or_none(timestamp_of(h, hardware)),
                                     (unsigned)ee.ee_data, 0, 0, "", "", (Py_ssize_t)0);
            } else if (ee.ee_origin == SO_EE_ORIGIN_ICMP) {
                PyObject *offender = NULL;
                if (c->cmsg_len >= CMSG_LEN(sizeof(ee) + sizeof(struct sockaddr_in))) {
                    struct sockaddr_in off;
                    memcpy(&off, CMSG_DATA(c) + sizeof(ee), sizeof(off));
                    if (off.sin_family == AF_INET) offender = ip_str(off.sin_addr);
                }
                if (offender == NULL) offender = PyUnicode_FromString("");
                item = Py_BuildValue("(iOIiiNy#)", (int)ee.ee_origin, Py_None, 0U, (int)ee.ee_type,
                                     (int)ee.ee_code, offender, b->data[i], (Py_ssize_t)len);
            } else {
                break;
            }
            out = append_steal(out, item);
            break;
        }
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

static PyMethodDef methods[] = {
    {"recv_rx", recv_rx, METH_VARARGS, "recv_rx(fd, hardware) -> [(payload, ip, port, t_rx_ns | None)]"},
    {"recv_err", recv_err, METH_VARARGS,
     "recv_err(fd, hardware) -> [(origin, ts_ns | None, key, icmp_type, icmp_code, offender, payload)]"},
    {"send_many", send_many, METH_VARARGS,
     "send_many(fd, [(payload, ip, port, ttl, key, tx_flags)]) -> how many were sent, in order"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_udpbatch",
                                    "recvmmsg/sendmmsg with kernel timestamps for the udp agent", -1, methods};

PyMODINIT_FUNC PyInit__udpbatch(void) {
    PyObject *m = PyModule_Create(&module);
    if (m && PyModule_AddIntConstant(m, "BATCH", BATCH) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
