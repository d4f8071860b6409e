// The native core of the embedded engine: event heap, network and MPI layer of hybridsim/engine/{core,network,mpi}.py
// in C++, event for event. See hybridsim/engine/cores.py for how it is wired and docs in
// hybridsim/engine/README.md ("The native core").
//
// Identity with the Python engine rests on three things, each kept exactly:
//  * one heap ordered by (time, seq) with one shared insertion counter, Python events (director, records, jobs,
//    sampling) included: the pop order is the Python engine's;
//  * the handlers below are line-by-line ports of network.py / mpi.py: same branches, same pushes in the same order,
//    same floating-point expressions in the same order (build with -ffp-contract=off, no -ffast-math);
//  * the random stream is CPython's MT19937 taken over from random.Random.getstate(), with CPython's random() and
//    randrange() (_randbelow_with_getrandbits) reproduced draw for draw.
#include <pybind11/pybind11.h>
#include <pybind11/numpy.h>
#include <pybind11/stl.h>
#include <structmember.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

namespace py = pybind11;
using i64 = int64_t;
using i32 = int32_t;

// ------------------------------------------------------------------------------------------------ CPython MT19937
struct MT {
    uint32_t mt[624];
    int mti = 625;
    // random.Random.getstate()[1]: the 624 words and the position, as Python hands them over and takes them back
    void set_state(const std::vector<int64_t>& st) {
        if (st.size() != 625) throw py::value_error("MT19937 state: 625 integers expected");
        for (int i = 0; i < 624; i++) mt[i] = (uint32_t)st[i];
        mti = (int)st[624];
    }
    std::vector<int64_t> state() const {
        std::vector<int64_t> st(625);
        for (int i = 0; i < 624; i++) st[i] = mt[i];
        st[624] = mti;
        return st;
    }
    uint32_t next() {
        static const uint32_t mag01[2] = {0x0u, 0x9908b0dfu};
        uint32_t y;
        if (mti >= 624) {
            int kk;
            for (kk = 0; kk < 624 - 397; kk++) {
                y = (mt[kk] & 0x80000000u) | (mt[kk + 1] & 0x7fffffffu);
                mt[kk] = mt[kk + 397] ^ (y >> 1) ^ mag01[y & 0x1u];
            }
            for (; kk < 623; kk++) {
                y = (mt[kk] & 0x80000000u) | (mt[kk + 1] & 0x7fffffffu);
                mt[kk] = mt[kk + (397 - 624)] ^ (y >> 1) ^ mag01[y & 0x1u];
            }
            y = (mt[623] & 0x80000000u) | (mt[0] & 0x7fffffffu);
            mt[623] = mt[396] ^ (y >> 1) ^ mag01[y & 0x1u];
            mti = 0;
        }
        y = mt[mti++];
        y ^= (y >> 11);
        y ^= (y << 7) & 0x9d2c5680u;
        y ^= (y << 15) & 0xefc60000u;
        y ^= (y >> 18);
        return y;
    }
    // random.random(): genrand_res53
    double random() {
        uint32_t a = next() >> 5, b = next() >> 6;
        return (a * 67108864.0 + b) * (1.0 / 9007199254740992.0);
    }
    // random.randrange(n), n >= 1: _randbelow_with_getrandbits (n = 1 still draws)
    i64 randbelow(i64 n) {
        int k = 0;
        for (uint64_t v = (uint64_t)n; v; v >>= 1) k++;
        if (k > 32) throw std::runtime_error("randrange above 2**32 is not supported by the native core");
        uint32_t r = next() >> (32 - k);
        while ((i64)r >= n) r = next() >> (32 - k);
        return (i64)r;
    }
};

// ------------------------------------------------------------------------------------------------ model objects
enum Kind : i32 { K_ARRIVE, K_PORT, K_CREDIT, K_TSEND, K_TCREDIT, K_TARRIVE, K_LOCAL, K_INJECT, K_RESUME, K_PY, K_BG, K_PRED,
                  K_SAMPLE };
enum MsgKind : i32 { EAGER, RTS, ACK, DATA, BG };
enum OpKind : i32 { COMPUTE = 0, ISEND = 1, IRECV = 2, SEND = 3, RECV = 4, WAITALL = 5 };
enum Routing : i32 { MINIMAL, NONMINIMAL, ADAPTIVE, PROG_ADAPTIVE };

static const i64 EAGER_THRESHOLD = 8192;
static const i64 CONTROL_SIZE = 64;
static const double SELF_OVERHEAD = 10.0, SOFT_DELAY = 2500.0, NIC_DELAY = 1000.0, COPY_PER_BYTE = 0.55;
static const double CONTROL_OFFSET = SELF_OVERHEAD + SOFT_DELAY + NIC_DELAY;

// 24 bytes: the event time as the bits of a non-negative double (ordered as the doubles are: times are >= 0, and
// -0.0 is stored as 0.0), the insertion counter and the kind in one word (seq << 8 | kind); seq is unique, so
// ordering by (tbits, key) is ordering by (t, seq), the Python heap's order, and one 128-bit compare does it
struct Ev {
    uint64_t tb;
    uint64_t key;
    i32 a;
    i32 b;
    inline i32 kind() const { return (i32)(key & 0xff); }
    inline double t() const {
        double d;
        std::memcpy(&d, &tb, sizeof d);
        return d;
    }
    inline unsigned __int128 ord() const { return ((unsigned __int128)tb << 64) | key; }
};
static inline uint64_t tbits(double t) {
    if (t == 0.0) t = 0.0;
    uint64_t b;
    std::memcpy(&b, &t, sizeof b);
    return b;
}
static inline bool before(const Ev& x, const Ev& y) { return x.ord() < y.ord(); }

struct Pkt {
    i32 msg, size, src, dst, dst_router, dst_group, src_group, igroup, hops, up, jb, next;
    bool nonmin, visited, last;
    i32 lhops;
};

struct Fifo {  // intrusive FIFO of packets (each packet is in at most one queue at a time)
    i32 head = -1, tail = -1;
};

struct Port {
    double busy_until = 0.0, nspb, delay, busy_acc = 0.0, busy_start = -1.0;
    i64 bytes = 0, pkts = 0, stalled = 0;
    i32 rr, npend = 0, occ = 0, qcount = 0, cap, dest;
    bool sched = false, to_term, local;
};
struct VC {
    i32 occ = 0;
    double occ_int = 0.0, occ_t = 0.0;
    Fifo pend, ovf;
};
struct Term {
    Fifo q;
    i32 occ = 0, router;
    double busy = 0.0;
    bool sched = false;
    i64 bytes_in = 0, bytes_out = 0;
};

struct Msg {
    i32 kind;
    i64 src, dst, tag, size, wire;
    i32 src_term, dst_term;
    i64 left;
    i32 sreq, rreq, jb, refs;
};
struct Req {
    bool done, waited;
    i64 rank;
    i32 refs;
};
struct Op {
    i32 kind;
    i64 peer, nbytes, tag, req;
    double ns;
    i32 woff, wn;
};
struct KeyHash {
    size_t operator()(const std::pair<i64, i64>& k) const {
        return std::hash<i64>()(k.first * 1000003 ^ k.second);
    }
};
struct Fifo32 {  // a FIFO of ints that reuses its storage once drained (matching queues are short-lived)
    std::vector<i32> v;
    size_t head = 0;
    bool empty() const { return head == v.size(); }
    i32 front() const { return v[head]; }
    void push_back(i32 x) { v.push_back(x); }
    void pop_front() {
        if (++head == v.size()) {
            v.clear();
            head = 0;
        }
    }
    std::vector<i32>::const_iterator begin() const { return v.begin() + head; }
    std::vector<i32>::const_iterator end() const { return v.end(); }
};
using MatchMap = std::unordered_map<std::pair<i64, i64>, Fifo32, KeyHash>;
struct Rank {
    i64 gid, job, local, it = 0;
    i32 term;
    bool done = false, alive = true;
    size_t pc = 0;
    i64 nwait = 0;
    std::vector<Op> ops;
    std::vector<i64> waits;
    py::object pyops;
    i64 bg_n = 0, bg_bytes = 0;  // a background sender (start_background): its job's ranks, bytes per message
    double bg_interval = 0.0;
    double pred_t0 = 0.0;        // the start of the predicted iteration ``it`` (pred_ends)
    std::unordered_map<i64, i32> reqs;
    MatchMap posted, unexpected;  // posted: requests; unexpected: messages
};

template <class T>
struct Pool {  // objects addressed by index, freed slots reused (never hold a reference across a call that allocates)
    std::vector<T> v;
    std::vector<i32> free_;
    i32 alloc() {
        if (!free_.empty()) {
            i32 i = free_.back();
            free_.pop_back();
            return i;
        }
        v.emplace_back();
        return (i32)(v.size() - 1);
    }
    void release(i32 i) { free_.push_back(i); }
    T& operator[](i32 i) { return v[i]; }
};

// ------------------------------------------------------------------------------------------------ the core
class Core {
   public:
    // event loop
    std::vector<Ev> heap;
    std::vector<Ev> leftover;
    uint64_t seq = 0;
    double now = 0.0;
    i64 events = 0;
    bool stopped = false;
    struct PySlot {
        py::object h, a, b;
    };
    std::vector<PySlot> pyslots;
    std::vector<i32> pyfree;

    // network constants and state
    i32 a, p_per_r, g, NV, P, vc_dest, vc_inter, mode, tcap;
    double cdelay, t_nspb, t_lat, max_packets;
    bool exact, debug;
    std::vector<Port> ports;
    std::vector<VC> vcs;
    std::vector<Term> terms;
    std::vector<i32> tvc;                       // terminal -> (port * NV + vc_dest)
    std::vector<i32> lport;                     // router * a + j -> port id
    std::vector<i32> gp_off, gp_len, gp_ports;  // router * g + G -> global ports of router to G
    std::vector<i32> lg_off, lg_len, lg_ports;  // router * g + G -> local ports to routers with links to G
    std::vector<i32> reach_off, reach_len, reach_g;
    std::vector<std::vector<i32>> rr_order;
    Pool<Pkt> pkts;
    i64 packets = 0, bytes_self = 0;
    MT rng;
    MT bg_rng;  // the background senders' generator (engine.py's bg_rng), apart from the network's

    // MPI layer
    Pool<Msg> msgs;
    Pool<Req> reqs;
    std::vector<std::unique_ptr<Rank>> ranks;  // by global id
    std::vector<std::vector<i64>> jbytes;      // per job: bytes per port (empty: not counted)
    std::vector<bool> jb_on;
    i64 messages = 0;
    py::object on_iteration_end, raise_limit;

    // predicted iterations (engine.py's _pred_end and _iter_start's parking, run here for performance): per job its
    // iterations, ranks, the modes decided so far (-1 unknown, 0 simulate, 1 predict) and the ranks parked at the
    // iteration waiting for its prediction; the records of predicted iterations ended since the last call into
    // Python, handed over (on_records) before any Python code runs, so Python sees them in event order
    struct JobPred {
        i64 iters = 0, n_ranks = 0, park_it = -1;
        std::vector<int8_t> modes;
        std::vector<i64> park_gid;
        std::vector<double> park_t;
        // a fast-forward stretch (stretch()): iterations ff_first .. ff_first + ff_h - 1, already decided PREDICT,
        // with their per-rank durations (row-major, local order); ff_dec of them reached (a rank arrived: the
        // decision the engine would have asked for), ff_pred of them scheduled; ff_t the time of the latest arrival
        // at a new one and ff_bytes the job's byte counters then (keep_background's snapshot)
        i64 ff_first = 0, ff_h = 0, ff_dec = 0, ff_pred = 0;
        double ff_t = 0.0;
        std::vector<double> ff_dur;
        std::vector<i64> ff_bytes;
        bool in_stretch(i64 it) const { return it >= ff_first && it < ff_first + ff_h; }
        void clear_park() {
            park_it = -1;
            park_gid.clear();
            park_t.clear();
        }
        // rank gid stops at predicted iteration it at t; true once every rank of the job is parked there
        bool add_park(i64 it, i64 gid, double t) {
            if (park_it != it) {
                clear_park();
                park_it = it;
            }
            park_gid.push_back(gid);
            park_t.push_back(t);
            return (i64)park_gid.size() >= n_ranks;
        }
    };
    std::vector<JobPred> jp;
    std::vector<i64> rb_gid, rb_it;
    std::vector<double> rb_t0, rb_t;
    py::object on_records, on_pred_next, on_parked;
    // the records of predicted iterations are made here, for performance (22 k of them in a 600-iteration mix, most
    // of a hybrid run's records): IterationRecord (a slots dataclass) allocated by its type and its six slots set
    // at the offsets its member descriptors give, as object.__setattr__ through those descriptors would
    py::object rec_type;
    Py_ssize_t rec_off[6] = {0, 0, 0, 0, 0, 0};
    std::vector<py::object> job_names;
    bool rec_untrack = false;  // every job name an exact str (make_record)

    Core(py::dict c) {
        a = c["a"].cast<i32>();
        p_per_r = c["p"].cast<i32>();
        g = c["g"].cast<i32>();
        NV = c["nv"].cast<i32>();
        P = c["P"].cast<i32>();
        vc_dest = NV - 1;
        vc_inter = NV - 2;
        mode = c["routing"].cast<i32>();
        tcap = c["tcap"].cast<i32>();
        cdelay = c["credit_delay"].cast<double>();
        t_nspb = c["t_nspb"].cast<double>();
        t_lat = c["t_lat"].cast<double>();
        max_packets = c["max_packets"].cast<double>();
        exact = c["exact_credits"].cast<bool>();
        debug = c["debug"].cast<bool>();
        auto cap = c["cap"].cast<std::vector<i32>>();
        auto nspb = c["nspb"].cast<std::vector<double>>();
        auto delay = c["delay"].cast<std::vector<double>>();
        nom_nspb = c["nspb_nominal"].cast<std::vector<double>>();
        nom_delay = c["delay_nominal"].cast<std::vector<double>>();
        max_bg = c["max_background"].cast<double>();
        auto dest = c["dest"].cast<std::vector<i32>>();
        auto to_term = c["to_term"].cast<std::vector<bool>>();
        auto local = c["local"].cast<std::vector<bool>>();
        size_t n = cap.size();
        ports.resize(n);
        vcs.resize(n * NV);
        for (size_t i = 0; i < n; i++) {
            Port& pt = ports[i];
            pt.cap = cap[i];
            pt.nspb = nspb[i];
            pt.delay = delay[i];
            pt.dest = dest[i];
            pt.to_term = to_term[i];
            pt.local = local[i];
            pt.rr = NV - 1;
        }
        auto trouter = c["term_router"].cast<std::vector<i32>>();
        terms.resize(trouter.size());
        for (size_t i = 0; i < trouter.size(); i++) terms[i].router = trouter[i];
        tvc = c["tvc"].cast<std::vector<i32>>();
        lport = c["lport"].cast<std::vector<i32>>();
        gp_off = c["gp_off"].cast<std::vector<i32>>();
        gp_len = c["gp_len"].cast<std::vector<i32>>();
        gp_ports = c["gp_ports"].cast<std::vector<i32>>();
        lg_off = c["lg_off"].cast<std::vector<i32>>();
        lg_len = c["lg_len"].cast<std::vector<i32>>();
        lg_ports = c["lg_ports"].cast<std::vector<i32>>();
        reach_off = c["reach_off"].cast<std::vector<i32>>();
        reach_len = c["reach_len"].cast<std::vector<i32>>();
        reach_g = c["reach_g"].cast<std::vector<i32>>();
        rr_order.resize(NV);
        for (i32 v0 = 0; v0 < NV; v0++)
            for (i32 k = 1; k <= NV; k++) rr_order[v0].push_back((v0 + k) % NV);
        on_iteration_end = c["on_iteration_end"];
        raise_limit = c["raise_limit"];
    }

    // ---------------------------------------------------------------------------------------------- event loop
    // a 4-ary min-heap (fewer levels, and a node's children share cache lines): same pop order as any heap, since
    // (t, seq) keys are unique
    inline void hpush(const Ev& e) {
        size_t i = heap.size();
        heap.push_back(e);
        while (i) {
            size_t p = (i - 1) >> 2;
            if (!before(e, heap[p])) break;
            heap[i] = heap[p];
            i = p;
        }
        heap[i] = e;
    }
    inline Ev hpop() {
        Ev top = heap[0];
        Ev last = heap.back();
        heap.pop_back();
        size_t n = heap.size();
        if (n) {
            size_t i = 0;
            for (;;) {
                size_t c = 4 * i + 1;
                if (c >= n) break;
                size_t best = c;
                if (c + 4 <= n) {  // the usual case: four children, chosen without branches
                    size_t b1 = before(heap[c + 1], heap[c]) ? c + 1 : c;
                    size_t b2 = before(heap[c + 3], heap[c + 2]) ? c + 3 : c + 2;
                    best = before(heap[b2], heap[b1]) ? b2 : b1;
                } else {
                    for (size_t k = c + 1; k < n; k++)
                        if (before(heap[k], heap[best])) best = k;
                }
                if (!before(heap[best], last)) break;
                heap[i] = heap[best];
                i = best;
            }
            heap[i] = last;
        }
        return top;
    }
    inline void push(double t, i32 kind, i32 x, i64 y = 0) {
        hpush(Ev{tbits(t), (seq++ << 8) | (uint64_t)kind, x, (i32)y});
    }
    void at(double t, py::object h, py::object x, py::object y) {
        if (!(t >= 0.0)) throw py::value_error("event time must be a number >= 0 ns, got " + std::to_string(t));
        i32 s;
        if (!pyfree.empty()) {
            s = pyfree.back();
            pyfree.pop_back();
        } else {
            pyslots.emplace_back();
            s = (i32)pyslots.size() - 1;
        }
        pyslots[s].h = std::move(h);
        pyslots[s].a = std::move(x);
        pyslots[s].b = std::move(y);
        push(t, K_PY, s);
    }
    void stop() {
        stopped = true;
        leftover.insert(leftover.end(), heap.begin(), heap.end());
        heap.clear();
    }

    void dispatch(const Ev& e) {
        double t = e.t();
        switch (e.kind()) {
            case K_ARRIVE: router_arrive(t, e.a, (i32)e.b); break;
            case K_PORT: port_send(t, e.a); break;
            case K_CREDIT:
                credit(t, e.a);
                if (debug) credit_checked(e.a);
                break;
            case K_TSEND: term_send(t, e.a); break;
            case K_TCREDIT:
                term_credit(t, e.a);
                if (debug) term_credit_checked(e.a);
                break;
            case K_TARRIVE:
                if (debug) term_arrive_checked(e.a, (i32)e.b);
                term_arrive(t, e.a, (i32)e.b);
                break;
            case K_LOCAL: local_done(t, e.a); break;
            case K_INJECT: inject(t, e.a); break;
            case K_RESUME: advance(t, e.a); break;
            case K_BG: bg_send(t, e.a); break;
            case K_PRED: pred_end(t, e.a); break;
            case K_SAMPLE: sample_event(t); break;
            case K_PY: {
                PySlot s = std::move(pyslots[e.a]);
                pyfree.push_back(e.a);
                flush_records();
                s.h(t, s.a, s.b);
                break;
            }
        }
    }

    // EventLoop.run, same semantics (partial / stop / checks)
    bool run(double until, i64 max_events, py::object on_check, i64 check_every) {
        i64 n = events;
        i64 limit = max_events >= 0 ? max_events : std::numeric_limits<i64>::max();
        i64 next_check = std::min(n + check_every, limit);
        bool partial = false;
        double t = now;
        bool has_check = !on_check.is_none();
        while (!heap.empty()) {
            Ev e = hpop();
            t = e.t();
            if (t > until) {
                hpush(e);
                t = until;
                partial = true;
                break;
            }
            dispatch(e);
            n += 1;
            if (n >= next_check) {
                now = t;
                events = n;
                flush_records();
                if (has_check) on_check(t, n);
                if (n >= limit) {
                    partial = !heap.empty();
                    break;
                }
                next_check = std::min(n + check_every, limit);
            }
        }
        now = t;
        events = n;
        flush_records();
        return partial && !stopped;
    }

    // ---------------------------------------------------------------------------------------------- predicted iterations
    void pred_job(i64 j, i64 iters, i64 n_ranks) {
        if (j < 0) throw py::value_error("job ids are >= 0");
        if (j >= (i64)jp.size()) jp.resize(j + 1);
        JobPred& J = jp[j];
        J.iters = iters;
        J.n_ranks = n_ranks;
        J.modes.assign(iters, -1);
        J.clear_park();
    }
    void forget_job(i64 j) {
        if (j >= 0 && j < (i64)jp.size()) jp[j] = JobPred();
    }
    void set_mode(i64 j, i64 it, bool predict) {
        JobPred& J = jp.at(j);
        if (it >= 0 && it < (i64)J.modes.size()) J.modes[it] = predict ? 1 : 0;
    }
    // _iter_start's parking: rank gid is at iteration it (predicted) from t; returns (gids, times) once every rank
    // of the job is parked (and forgets them), else None
    py::object park(i64 j, i64 it, i64 gid, double t) {
        JobPred& J = jp.at(j);
        if (!J.add_park(it, gid, t)) return py::none();
        py::object out = py::make_tuple(py::cast(J.park_gid), py::cast(J.park_t));
        J.clear_park();
        return out;
    }
    void unpark(i64 j) {
        if (j >= 0 && j < (i64)jp.size()) jp[j].clear_park();
    }
    // _predict's scheduling: rank gids[k] ends its predicted iteration its[k] (started at t0s[k]) at ends[k]
    void pred_ends(const std::vector<i64>& gids, const std::vector<i64>& its, const std::vector<double>& t0s,
                   const std::vector<double>& ends) {
        for (size_t k = 0; k < gids.size(); k++) {
            Rank* rs = rank_of(gids[k]);
            if (!rs) throw py::key_error(std::to_string(gids[k]));
            if (!(ends[k] >= 0.0)) throw py::value_error("event time must be a number >= 0 ns");
            rs->it = its[k];
            rs->pred_t0 = t0s[k];
            push(ends[k], K_PRED, (i32)gids[k]);
        }
    }
    // _pred_end: the record (buffered), then _iter_start: parked here when the next iteration is known to be
    // predicted, else Python's _iter_start (on_pred_next) once the records are handed over
    void pred_end(double t, i32 gid) {
        Rank* rs = ranks[gid].get();
        if (rs->done) return;  // its job was killed at its walltime
        rb_gid.push_back(gid);
        rb_it.push_back(rs->it);
        rb_t0.push_back(rs->pred_t0);
        rb_t.push_back(t);
        i64 it = ++rs->it;
        JobPred& J = jp[rs->job];
        if (it < J.iters && J.modes[it] == 1) {
            bool ff = J.in_stretch(it);
            if (ff && J.park_it != it) {  // the first rank at a boundary of the stretch: the skipped decision
                J.ff_dec = it - J.ff_first + 1;
                J.ff_t = t;
                if (counted(rs->job) >= 0) J.ff_bytes = jbytes[rs->job];
            }
            if (!J.add_park(it, gid, t)) return;
            if (ff) {  // _predict_ranks with the stretch's durations: ends pushed in local order, as pred_ends
                stretch_ends(J, it);
                return;
            }
            std::vector<i64> g;
            std::vector<double> ts;
            g.swap(J.park_gid);
            ts.swap(J.park_t);
            J.clear_park();
            flush_records();
            on_parked(rs->job, it, g, ts);
            return;
        }
        flush_records();
        on_pred_next(t, gid, it);
    }
    // every rank of job J is parked at iteration it of its stretch: each ends it at its park time plus its
    // duration, pushed in local order (what the engine's _pred_parked and pred_ends do, the same events in the same
    // order)
    void stretch_ends(JobPred& J, i64 it) {
        i64 n = J.n_ranks;
        std::vector<double> t0(n, 0.0);
        std::vector<i64> gid(n, -1);
        for (size_t k = 0; k < J.park_gid.size(); k++) {
            Rank* rs = ranks[J.park_gid[k]].get();
            t0[rs->local] = J.park_t[k];
            gid[rs->local] = J.park_gid[k];
        }
        J.clear_park();
        i64 row = it - J.ff_first;
        const double* d = J.ff_dur.data() + row * n;
        for (i64 l = 0; l < n; l++) {
            Rank* rs = ranks[gid[l]].get();
            rs->pred_t0 = t0[l];
            push(t0[l] + d[l], K_PRED, (i32)gid[l]);
        }
        J.ff_pred = row + 1;
    }
    // the engine's fast-forward of job j (Director.fast_forward): iterations first .. first + h - 1 are PREDICT
    // with durations dur (h rows of n_ranks, local order); its ranks park and end them here, no Python call
    void stretch(i64 j, i64 first, py::array_t<double, py::array::c_style | py::array::forcecast> dur) {
        JobPred& J = jp.at(j);
        if (dur.ndim() != 2 || dur.shape(1) != J.n_ranks)
            throw py::value_error("a stretch is (iterations, ranks) durations, one per rank");
        i64 h = (i64)dur.shape(0);
        if (first < 0 || first + h > J.iters) throw py::value_error("stretch beyond the job's iterations");
        const double* d = dur.data();
        for (i64 k = 0; k < h * J.n_ranks; k++)
            if (!(d[k] >= 0.0) || !std::isfinite(d[k])) throw py::value_error("stretch durations must be finite, >= 0");
        J.ff_first = first;
        J.ff_h = h;
        J.ff_dec = J.ff_pred = 0;
        J.ff_dur.assign(d, d + h * J.n_ranks);
        for (i64 m = 0; m < h; m++) J.modes[first + m] = 1;
    }
    // (reached, scheduled, time of the latest reached, byte counters then or None; None too while reached <= since:
    // the caller has them already, and a list of every port's counter is the costly part of the call)
    py::object stretch_state(i64 j, i64 since) {
        JobPred& J = jp.at(j);
        py::object b = py::none();
        if (J.ff_dec > 0 && J.ff_dec > since && counted(j) >= 0) b = py::cast(J.ff_bytes);
        return py::make_tuple(J.ff_dec, J.ff_pred, J.ff_t, b);
    }
    // shorten the stretch to its first h iterations (at least the reached ones): the others are undecided again
    void cut(i64 j, i64 h) {
        if (j < 0 || j >= (i64)jp.size()) return;
        JobPred& J = jp[j];
        h = std::max(h, J.ff_dec);
        for (i64 it = J.ff_first + h; it < J.ff_first + J.ff_h; it++) J.modes[it] = -1;
        J.ff_h = std::min(J.ff_h, h);
    }
    void set_record_type(py::object type, py::list names) {
        static const char* fields[6] = {"job", "job_id", "rank", "iteration", "start", "end"};
        if (!PyType_Check(type.ptr())) throw py::type_error("a record type is needed");
        PyTypeObject* tp = (PyTypeObject*)type.ptr();
        for (int k = 0; k < 6; k++) {
            PyObject* d = PyDict_GetItemString(tp->tp_dict, fields[k]);
            if (!d || !PyObject_TypeCheck(d, &PyMemberDescr_Type))
                throw py::type_error(std::string("the record type has no slot ") + fields[k]);
            PyMemberDef* m = ((PyMemberDescrObject*)d)->d_member;
            if (m->type != T_OBJECT_EX) throw py::type_error(std::string("slot ") + fields[k] + " is not an object");
            rec_off[k] = m->offset;
        }
        rec_type = type;
        job_names.clear();
        rec_untrack = true;
        for (auto n : names) {
            job_names.push_back(py::reinterpret_borrow<py::object>(n));
            if (!PyUnicode_CheckExact(n.ptr())) rec_untrack = false;
        }
    }
    PyObject* make_record(i64 job, i64 local, i64 it, double t0, double t1) {
        PyTypeObject* tp = (PyTypeObject*)rec_type.ptr();
        PyObject* o = tp->tp_alloc(tp, 0);
        if (!o) throw py::error_already_set();
        PyObject* v[6] = {job_names.at(job).ptr(), PyLong_FromLongLong(job), PyLong_FromLongLong(local),
                          PyLong_FromLongLong(it), PyFloat_FromDouble(t0), PyFloat_FromDouble(t1)};
        Py_INCREF(v[0]);
        for (int k = 0; k < 6; k++) {
            if (!v[k]) {
                for (int q = k + 1; q < 6; q++) Py_XDECREF(v[q]);
                Py_DECREF(o);
                throw py::error_already_set();
            }
            *(PyObject**)((char*)o + rec_off[k]) = v[k];
        }
        // a record holds a str, ints and floats only and is frozen: it can be in no reference cycle, so the cyclic
        // collector need not track it (as CPython untracks tuples of such values); 22 k records of a hybrid run
        // would otherwise make the first collection after the run walk them all (~2 ms)
        if (rec_untrack && PyObject_IS_GC(o)) PyObject_GC_UnTrack(o);
        return o;
    }
    // hand the buffered records over: on_records(records, {job: count}) in event order
    void flush_records() {
        if (rb_gid.empty()) return;
        std::vector<i64> g, it;
        std::vector<double> t0, t1;
        g.swap(rb_gid);
        it.swap(rb_it);
        t0.swap(rb_t0);
        t1.swap(rb_t);
        size_t n = g.size();
        py::list recs(n);
        std::vector<i64> count;
        // per (job, iteration), in first-seen order: records, earliest start, latest end (a burst holds a few
        // iterations of many ranks: what a director's timeline needs, without a look at every record)
        struct Span {
            i64 job, it, n;
            double lo, hi;
        };
        std::vector<Span> spans;
        for (size_t k = 0; k < n; k++) {
            const Rank* rs = ranks[g[k]].get();
            PyList_SET_ITEM(recs.ptr(), k, make_record(rs->job, rs->local, it[k], t0[k], t1[k]));
            if (rs->job >= (i64)count.size()) count.resize(rs->job + 1, 0);
            count[rs->job]++;
            Span* sp = nullptr;
            for (size_t m = spans.size(); m-- > 0;)
                if (spans[m].job == rs->job && spans[m].it == it[k]) {
                    sp = &spans[m];
                    break;
                }
            if (sp == nullptr) {
                spans.push_back(Span{rs->job, it[k], 1, t0[k], t1[k]});
            } else {
                sp->n++;
                if (t0[k] < sp->lo) sp->lo = t0[k];
                if (t1[k] > sp->hi) sp->hi = t1[k];
            }
        }
        py::dict counts;
        for (size_t j = 0; j < count.size(); j++)
            if (count[j]) counts[py::int_(j)] = py::int_(count[j]);
        py::list sp(spans.size());
        for (size_t m = 0; m < spans.size(); m++)
            PyList_SET_ITEM(sp.ptr(), m, py::make_tuple(spans[m].job, spans[m].it, spans[m].n, spans[m].lo,
                                                        spans[m].hi).release().ptr());
        on_records(recs, counts, sp);
    }

    // ---------------------------------------------------------------------------------------------- FIFOs
    inline void fpush(Fifo& f, i32 pk) {
        pkts[pk].next = -1;
        if (f.tail >= 0) pkts[f.tail].next = pk;
        else f.head = pk;
        f.tail = pk;
    }
    inline i32 fpop(Fifo& f) {
        i32 pk = f.head;
        f.head = pkts[pk].next;
        if (f.head < 0) f.tail = -1;
        return pk;
    }

    // ---------------------------------------------------------------------------------------------- routing
    inline i32 randrange(i64 n) { return (i32)rng.randbelow(n); }
    inline i32 score(i32 pid) const { return ports[pid].occ + ports[pid].qcount; }
    inline i32 pick(const i32* c, i32 n) { return n > 1 ? c[randrange(n)] : c[0]; }

    i32 draw_igroup(i32 sg, i32 dg) {
        if (g <= 2 || sg == dg) return -1;
        i32 lo = sg < dg ? sg : dg, hi = sg < dg ? dg : sg;
        i32 k = randrange(g - 2);
        if (k >= lo) k += 1;
        if (k >= hi) k += 1;
        return k;
    }
    i32 best_global(const i32* c, i32 n) {
        if (n == 1) return c[0];
        i32 i = randrange(n);
        i32 j = randrange(n - 1);
        if (j >= i) j += 1;
        i32 x = c[i], y = c[j];
        i32 sx = score(x), sy = score(y);
        if (sx < sy) return x;
        if (sy < sx) return y;
        return rng.random() < 0.5 ? x : y;
    }
    i32 best_local(const i32* c, i32 n) {
        if (n == 1) return c[0];
        i32 best = -1;
        i64 bs = (i64)1 << 60;
        i32 ties = 0;
        for (i32 k = 0; k < n; k++) {
            i32 sc = score(c[k]);
            if (sc < bs) {
                best = c[k];
                bs = sc;
                ties = 1;
            } else if (sc == bs) {
                ties += 1;
                if (randrange(ties) == 0) best = c[k];
            }
        }
        return best;
    }
    inline i32 gpn(i32 r, i32 G) const { return gp_len[(size_t)r * g + G]; }
    inline const i32* gpc(i32 r, i32 G) const { return gp_ports.data() + gp_off[(size_t)r * g + G]; }
    inline i32 lgn(i32 r, i32 G) const { return lg_len[(size_t)r * g + G]; }
    inline const i32* lgc(i32 r, i32 G) const { return lg_ports.data() + lg_off[(size_t)r * g + G]; }
    [[noreturn]] void no_route(i32 r, i32 G) {
        throw py::key_error("no route from router " + std::to_string(r) + " to group " + std::to_string(G));
    }
    // `gp.get(G) or lgw[r][G]`
    inline void cands_to(i32 r, i32 G, const i32*& c, i32& n) {
        n = gpn(r, G);
        if (n) {
            c = gpc(r, G);
            return;
        }
        n = lgn(r, G);
        if (!n) no_route(r, G);
        c = lgc(r, G);
    }

    i32 prog_adaptive(i32 r, i32 pki, bool at_source, i32 dg) {
        i32 mport;
        if (gpn(r, dg)) mport = best_global(gpc(r, dg), gpn(r, dg));
        else {
            if (!lgn(r, dg)) no_route(r, dg);
            mport = best_local(lgc(r, dg), lgn(r, dg));
        }
        Pkt* pk = &pkts[pki];
        i32 ig = pk->igroup;
        i32 nport = -1;
        if (ig >= 0) {
            if (at_source) {
                if (gpn(r, ig)) nport = best_global(gpc(r, ig), gpn(r, ig));
                else if (lgn(r, ig)) nport = best_local(lgc(r, ig), lgn(r, ig));
            } else {
                bool have = gpn(r, ig) > 0;
                if (!have && !pk->nonmin) {
                    std::vector<i32> choices;
                    const i32* rg = reach_g.data() + reach_off[r];
                    for (i32 k = 0; k < reach_len[r]; k++)
                        if (rg[k] != pk->src_group && rg[k] != dg) choices.push_back(rg[k]);
                    if (!choices.empty()) {
                        ig = pk->igroup = choices[randrange((i64)choices.size())];
                        if (!gpn(r, ig)) no_route(r, ig);
                        have = true;
                    }
                }
                if (have) nport = best_global(gpc(r, ig), gpn(r, ig));
            }
        }
        if (pk->nonmin && !pk->visited && nport >= 0) return nport;
        i32 ms = score(mport);
        if (nport < 0 || ms <= 0) return mport;
        if (ms <= 2 * score(nport)) return mport;
        pk->nonmin = true;
        return nport;
    }

    i32 ugal(i32 r, i32 pki, bool at_source, i32 dg) {
        Pkt* pk = &pkts[pki];
        if (at_source && pk->igroup >= 0) {
            const i32* mc;
            i32 mn = gpn(r, dg), m_hops = 2;
            if (mn) mc = gpc(r, dg);
            else {
                mn = lgn(r, dg);
                if (!mn) no_route(r, dg);
                mc = lgc(r, dg);
                m_hops = 3;
            }
            i32 ig = pk->igroup;
            const i32* nc;
            i32 nn = gpn(r, ig), n_hops = 4;
            if (nn) nc = gpc(r, ig);
            else {
                nn = lgn(r, ig);
                if (!nn) no_route(r, ig);
                nc = lgc(r, ig);
                n_hops = 5;
            }
            i32 mp = mc[randrange(mn)];
            i32 np_ = nc[randrange(nn)];
            if ((i64)score(mp) * m_hops <= (i64)score(np_) * n_hops) return mp;
            pk->nonmin = true;
            return np_;
        }
        i32 target = (pk->nonmin && !pk->visited) ? pk->igroup : dg;
        const i32* c;
        i32 n;
        cands_to(r, target, c, n);
        return pick(c, n);
    }

    // the output (port * NV + vc) of packet pki at router r
    i32 route(i32 r, i32 pki) {
        Pkt* pk = &pkts[pki];
        i32 dr = pk->dst_router;
        if (r == dr) return tvc[pk->dst];
        i32 c = r / a;
        i32 dg = pk->dst_group;
        if (c == dg) {
            i32 lp = lport[(size_t)r * a + dr % a];
            return lp * NV + vc_dest;
        }
        i32 port;
        if (c != pk->src_group) {
            pk->visited = true;
            i32 n = gpn(r, dg);
            if (n) {
                port = mode == PROG_ADAPTIVE ? best_global(gpc(r, dg), n) : pick(gpc(r, dg), n);
            } else {
                n = lgn(r, dg);
                if (!n) no_route(r, dg);
                port = mode == PROG_ADAPTIVE ? best_local(lgc(r, dg), n) : pick(lgc(r, dg), n);
            }
            return port * NV + vc_inter;
        }
        bool at_source = pk->hops == 0;
        if (at_source) {
            i32 ig = draw_igroup(pk->src_group, dg);
            pk = &pkts[pki];
            pk->igroup = ig;
        }
        i32 vc = pk->lhops;
        if (mode == PROG_ADAPTIVE) {
            port = prog_adaptive(r, pki, at_source, dg);
        } else if (mode == MINIMAL) {
            const i32* cc;
            i32 n;
            cands_to(r, dg, cc, n);
            port = pick(cc, n);
        } else if (mode == NONMINIMAL) {
            i32 target = pk->igroup >= 0 ? pk->igroup : dg;
            pk->nonmin = target != dg;
            const i32* cc;
            i32 n;
            cands_to(r, target, cc, n);
            port = pick(cc, n);
        } else {
            port = ugal(r, pki, at_source, dg);
        }
        if (ports[port].local) pkts[pki].lhops = 1;
        return port * NV + vc;
    }

    // ---------------------------------------------------------------------------------------------- terminals
    void inject(double t, i32 mi) {
        Msg& m = msgs[mi];
        i32 src = m.src_term, dst = m.dst_term;
        i64 size = m.wire;
        if (src == dst) {
            bytes_self += size;
            m.left = 0;
            on_local(t, mi);
            on_deliver(t, mi);
            return;
        }
        i64 npk = std::max<i64>(1, (size + P - 1) / P);
        if ((double)npk > max_packets) {
            flush_records();
            raise_limit(size, npk);
            throw std::runtime_error("max_packets_per_message");
        }
        m.left = npk;
        i32 dr = dst / p_per_r;
        i32 dg = dr / a;
        i32 sg = src / p_per_r / a;
        i32 jb = m.jb;
        for (i64 i = 0; i < npk; i++) {
            i32 k = pkts.alloc();
            Pkt& pk = pkts[k];
            bool last = i == npk - 1;
            pk = Pkt{mi, last ? (i32)(size - (i64)P * (npk - 1)) : P, src, dst, dr, dg, sg, -1, 0, -1, jb, -1,
                     false, false, last, 0};
            fpush(terms[src].q, k);
        }
        packets += npk;
        terms[src].bytes_in += size;
        if (!terms[src].sched) term_send(t, src);
    }

    void term_send(double t, i32 ti) {
        Term* term = &terms[ti];
        term->sched = false;
        if (term->q.head < 0) return;
        if (t < term->busy) {
            term->sched = true;
            push(term->busy, K_TSEND, ti);
            return;
        }
        i32 o = term->occ;
        if (o >= tcap) return;
        i32 r = term->router;
        double start = t;
        while (terms[ti].q.head >= 0 && o < tcap) {
            i32 k = fpop(terms[ti].q);
            o += 1;
            double end = start + (double)pkts[k].size * t_nspb;
            push(end + t_lat, K_ARRIVE, r, k);
            if (pkts[k].last) {
                if (start == t) on_local(t, pkts[k].msg);
                else push(start, K_LOCAL, pkts[k].msg);
            }
            start = end;
        }
        terms[ti].occ = o;
        terms[ti].busy = start;
    }

    void local_done(double t, i32 mi) { on_local(t, mi); }

    void term_credit(double t, i32 ti) {
        terms[ti].occ -= 1;
        if (!terms[ti].sched) term_send(t, ti);
    }

    void term_arrive(double t, i32 tid, i32 k) {
        credit_up(t, k);
        terms[tid].bytes_out += pkts[k].size;
        i32 mi = pkts[k].msg;
        pkts.release(k);
        msgs[mi].left -= 1;
        if (msgs[mi].left == 0) on_deliver(t, mi);
    }

    // ---------------------------------------------------------------------------------------------- routers
    // Packet k takes a slot of (port pid, VC vi) (its occupancy already counted): queue it for the port, return the
    // credit it held upstream, start the port if idle (router_arrive's admission and credit's overflow head alike).
    inline void admit(double t, i32 pid, i32 vi, i32 k) {
        Port& port = ports[pid];
        fpush(vcs[vi].pend, k);
        port.npend += 1;
        credit_up(t, k);
        pkts[k].up = vi;
        if (!port.sched) {
            if (t >= port.busy_until) port_send(t, pid);
            else {
                port.sched = true;
                push(port.busy_until, K_PORT, pid);
            }
        }
    }

    void router_arrive(double t, i32 r, i32 k) {
        i32 vi = route(r, k);
        pkts[k].hops += 1;
        i32 pid = vi / NV;
        Port& port = ports[pid];
        VC& vc = vcs[vi];
        i32 o = vc.occ;
        if (o < port.cap) {
            vc.occ_int += o * (t - vc.occ_t);
            vc.occ_t = t;
            vc.occ = o + 1;
            port.occ += 1;
            admit(t, pid, vi, k);
        } else {
            fpush(vc.ovf, k);
            port.qcount += 1;
            port.stalled += 1;
            if (port.busy_start < 0.0) port.busy_start = t;
        }
    }

    void port_send(double t, i32 pid) {
        Port& port = ports[pid];
        port.sched = false;
        i32 v = -1;
        for (i32 vv : rr_order[port.rr]) {
            if (vcs[(size_t)pid * NV + vv].pend.head >= 0) {
                v = vv;
                break;
            }
        }
        if (v < 0) return;
        port.rr = v;
        double bs = port.busy_start;
        if (bs >= 0.0) {
            port.busy_acc += t - bs;
            port.busy_start = -1.0;
        }
        i32 k = fpop(vcs[(size_t)pid * NV + v].pend);
        i32 n = port.npend - 1;
        port.npend = n;
        i32 size = pkts[k].size;
        double end = t + size * port.nspb;
        port.busy_until = end;
        port.bytes += size;
        port.pkts += 1;
        i32 jb = pkts[k].jb;
        if (jb >= 0 && jb_on[jb]) jbytes[jb][pid] += size;
        push(end + port.delay, port.to_term ? K_TARRIVE : K_ARRIVE, port.dest, k);
        if (n) {
            port.sched = true;
            push(end, K_PORT, pid);
        }
    }

    void credit_up(double t, i32 k) {
        i32 up = pkts[k].up;
        if (up >= 0) {
            VC& vc = vcs[up];
            if (exact || vc.ovf.head >= 0) {
                push(t + cdelay, K_CREDIT, up);
                return;
            }
            i32 o = vc.occ;
            vc.occ_int += o * (t - vc.occ_t);
            vc.occ_t = t;
            vc.occ = o - 1;
            Port& port = ports[up / NV];
            port.occ -= 1;
            double bs = port.busy_start;
            if (bs >= 0.0) {
                port.busy_acc += t - bs;
                port.busy_start = -1.0;
            }
        } else {
            i32 ti = pkts[k].src;
            Term& term = terms[ti];
            if (exact || (term.q.head >= 0 && !term.sched)) push(t + cdelay, K_TCREDIT, ti);
            else term.occ -= 1;
        }
    }

    void credit(double t, i32 vi) {
        i32 pid = vi / NV;
        Port& port = ports[pid];
        VC& vc = vcs[vi];
        i32 o = vc.occ;
        vc.occ_int += o * (t - vc.occ_t);
        vc.occ_t = t;
        if (vc.ovf.head >= 0) {
            i32 k = fpop(vc.ovf);
            port.qcount -= 1;
            admit(t, pid, vi, k);  // the freed slot goes to the overflow head at once: occupancy unchanged
        } else {
            vc.occ = o - 1;
            port.occ -= 1;
        }
        double bs = port.busy_start;
        if (bs >= 0.0) {
            port.busy_acc += t - bs;
            port.busy_start = -1.0;
        }
    }

    // ---------------------------------------------------------------------------------------------- MPI layer
    inline void req_ref(i32 q) {
        if (q >= 0) reqs[q].refs += 1;
    }
    inline void req_unref(i32 q) {
        if (q >= 0 && --reqs[q].refs == 0) reqs.release(q);
    }
    i32 new_req(i64 rank) {  // one reference: the caller's
        i32 q = reqs.alloc();
        reqs[q] = Req{false, false, rank, 1};
        return q;
    }
    inline void msg_unref(i32 mi) {
        if (--msgs[mi].refs == 0) {
            req_unref(msgs[mi].sreq);
            req_unref(msgs[mi].rreq);
            msgs.release(mi);
        }
    }
    Rank* rank_of(i64 gid) {
        if (gid < 0 || gid >= (i64)ranks.size() || !ranks[gid] || !ranks[gid]->alive) return nullptr;
        return ranks[gid].get();
    }

    // a message (its references: local completion and delivery, each dropped when handled) to its source NIC after
    // t plus CODES' local latency
    void post(double t, i32 kind, i64 src, i64 dst, i64 tag, i64 size, i64 wire, i32 st, i32 dt, i32 sreq, i32 rreq,
              i32 jb) {
        i32 mi = msgs.alloc();
        msgs[mi] = Msg{kind, src, dst, tag, size, wire, st, dt, 0, sreq, rreq, jb, 2};
        req_ref(sreq);
        req_ref(rreq);
        messages += 1;
        push((t + 0.505) + 0.5 * rng.random(), K_INJECT, mi);
    }

    // the job's per-port byte counters its messages carry (mpi.py's jb.get(job)): its id when counted, else -1
    inline i32 counted(i64 job) const { return (job < (i64)jb_on.size() && jb_on[job]) ? (i32)job : -1; }

    void send(double t, Rank& rs, i64 dst, i64 nbytes, i64 tag, i32 rq) {
        Rank* d = rank_of(dst);
        if (!d) throw py::key_error(std::to_string(dst));
        i32 jb = counted(rs.job);
        if (nbytes < EAGER_THRESHOLD)
            post((((t + SELF_OVERHEAD) + COPY_PER_BYTE * nbytes) + SOFT_DELAY) + NIC_DELAY, EAGER, rs.gid, dst, tag,
                 nbytes, nbytes, rs.term, d->term, rq, -1, jb);
        else
            post(t + CONTROL_OFFSET, RTS, rs.gid, dst, tag, nbytes, CONTROL_SIZE, rs.term, d->term, rq, -1, jb);
    }

    void send_background(double t, i64 gid, i64 dst, i64 nbytes) {
        Rank* rs = rank_of(gid);
        Rank* d = rank_of(dst);
        if (!rs || !d) throw py::key_error(std::to_string(rs ? dst : gid));
        i32 jb = counted(rs->job);
        post(t, BG, gid, dst, 0, nbytes, nbytes, rs->term, d->term, -1, -1, jb);
    }

    // engine.py's _bg_gen for a uniform-random background rank (workloads/simple.py UniformRandomJob.destination),
    // event for event: the destination drawn from bg_rng as random.Random.randrange(n) (a draw equal to the sender
    // becomes the next rank), the message posted, the next send one interval later
    void start_background(double t, i64 gid, i64 n, i64 nbytes, double interval) {
        Rank* rs = rank_of(gid);
        if (!rs) throw py::key_error(std::to_string(gid));
        if (n < 1) throw py::value_error("a background job needs at least one rank");
        rs->bg_n = n;
        rs->bg_bytes = nbytes;
        rs->bg_interval = interval;
        if (!(t >= 0.0)) throw py::value_error("event time must be a number >= 0 ns, got " + std::to_string(t));
        push(t, K_BG, (i32)gid);
    }
    void bg_send(double t, i32 gid) {
        Rank* rs = rank_of(gid);
        if (!rs) throw py::key_error(std::to_string(gid));
        i64 n = rs->bg_n, local = rs->local;
        i64 d = bg_rng.randbelow(n);
        if (d == local) d = (local + 1) % n;
        send_background(t, gid, gid - local + d, rs->bg_bytes);
        push(t + rs->bg_interval, K_BG, gid);
    }

    void on_local(double t, i32 mi) {
        i32 k = msgs[mi].kind;
        if (k == EAGER || k == DATA) complete(t, msgs[mi].sreq);
        msg_unref(mi);
    }

    void on_deliver(double t, i32 mi) {
        Msg m = msgs[mi];
        if (m.kind == DATA) {
            complete(t, m.rreq);
        } else if (m.kind == EAGER || m.kind == RTS) {
            Rank* rd = rank_of(m.dst);
            if (rd) {
                auto key = std::make_pair(m.src, m.tag);
                auto it = rd->posted.find(key);
                if (it != rd->posted.end() && !it->second.empty()) {
                    i32 rq = it->second.front();
                    it->second.pop_front();
                    if (m.kind == EAGER) complete(t, rq);
                    else ack(t, mi, rq);
                    req_unref(rq);  // the posted queue's reference
                } else {
                    rd->unexpected[key].push_back(mi);
                    return;  // the unexpected queue keeps this reference
                }
            }
        } else if (m.kind == ACK) {
            if (rank_of(m.dst)) {
                post(t + CONTROL_OFFSET, DATA, m.dst, m.src, m.tag, m.size, m.size, m.dst_term, m.src_term, m.sreq,
                     m.rreq, m.jb);
            }
        }
        msg_unref(mi);
    }

    void ack(double t, i32 mi, i32 rreq) {
        Msg m = msgs[mi];
        post(t + CONTROL_OFFSET, ACK, m.dst, m.src, m.tag, m.size, CONTROL_SIZE, m.dst_term, m.src_term, m.sreq, rreq,
             m.jb);
    }

    void irecv(double t, Rank& rs, i64 src, i64 tag, i32 rq) {
        auto key = std::make_pair(src, tag);
        auto it = rs.unexpected.find(key);
        if (it != rs.unexpected.end() && !it->second.empty()) {
            i32 mi = it->second.front();
            it->second.pop_front();
            if (msgs[mi].kind == EAGER) complete(t, rq);
            else ack(t, mi, rq);
            msg_unref(mi);
        } else {
            rs.posted[key].push_back(rq);
            req_ref(rq);
        }
    }

    void complete(double t, i32 q) {
        Req& rq = reqs[q];
        rq.done = true;
        if (rq.waited) {
            rq.waited = false;
            Rank* rs = ranks[rq.rank].get();
            rs->nwait -= 1;
            if (rs->nwait == 0) advance(t, rs->gid);
        }
    }

    void set_req(Rank& rs, i64 id, i32 q) {
        auto it = rs.reqs.find(id);
        if (it != rs.reqs.end()) {
            req_unref(it->second);
            it->second = q;
        } else rs.reqs.emplace(id, q);
        req_ref(q);
    }

    void advance(double t, i64 gid) {
        Rank& rs = *ranks[gid];
        if (rs.done) return;
        size_t i = rs.pc, n = rs.ops.size();
        i64 base = rs.gid - rs.local;
        while (i < n) {
            const Op op = rs.ops[i];
            i += 1;
            switch (op.kind) {
                case ISEND: {
                    i32 q = new_req(gid);
                    set_req(rs, op.req, q);
                    send(t, rs, base + op.peer, op.nbytes, op.tag, q);
                    req_unref(q);
                    break;
                }
                case IRECV: {
                    i32 q = new_req(gid);
                    set_req(rs, op.req, q);
                    irecv(t, rs, base + op.peer, op.tag, q);
                    req_unref(q);
                    break;
                }
                case WAITALL: {
                    i64 nw = 0;
                    for (i32 w = 0; w < op.wn; w++) {
                        i64 rid = rs.waits[op.woff + w];
                        auto it = rs.reqs.find(rid);
                        if (it == rs.reqs.end()) {
                            std::string rep = py::repr(rs.pyops[py::int_(i - 1)]).cast<std::string>();
                            throw py::value_error("job " + std::to_string(rs.job) + " rank " +
                                                  std::to_string(rs.local) + " iteration " + std::to_string(rs.it) +
                                                  ": WAITALL names request " + std::to_string(rid) +
                                                  ", which no ISEND/IRECV of this iteration created (op " + rep + ")");
                        }
                        Req& rq = reqs[it->second];
                        if (!rq.done) {
                            rq.waited = true;
                            nw += 1;
                        }
                    }
                    if (nw) {
                        rs.pc = i;
                        rs.nwait = nw;
                        return;
                    }
                    break;
                }
                case COMPUTE:
                    rs.pc = i;
                    push(t + op.ns, K_RESUME, (i32)gid);
                    return;
                case SEND: {
                    i32 q = new_req(gid);
                    send(t, rs, base + op.peer, op.nbytes, op.tag, q);
                    if (!reqs[q].done) {
                        reqs[q].waited = true;
                        rs.pc = i;
                        rs.nwait = 1;
                        req_unref(q);
                        return;
                    }
                    req_unref(q);
                    break;
                }
                case RECV: {
                    i32 q = new_req(gid);
                    irecv(t, rs, base + op.peer, op.tag, q);
                    if (!reqs[q].done) {
                        reqs[q].waited = true;
                        rs.pc = i;
                        rs.nwait = 1;
                        req_unref(q);
                        return;
                    }
                    req_unref(q);
                    break;
                }
                default: {
                    std::string rep = py::repr(rs.pyops[py::int_(i - 1)]).cast<std::string>();
                    throw py::value_error("rank " + std::to_string(rs.local) + " of job " + std::to_string(rs.job) +
                                          ": unknown op " + rep);
                }
            }
        }
        rs.pc = i;
        flush_records();
        on_iteration_end(t, gid);
    }

    // ---------------------------------------------------------------------------------------------- ranks (from Python)
    void add_rank(i64 gid, i64 job, i64 local, i32 term) {
        if (gid < 0 || gid >= ((i64)1 << 31)) throw py::value_error("rank global ids must fit 31 bits");
        if (gid >= (i64)ranks.size()) ranks.resize(gid + 1);
        auto r = std::make_unique<Rank>();
        r->gid = gid;
        r->job = job;
        r->local = local;
        r->term = term;
        ranks[gid] = std::move(r);
    }
    void clear_iteration(Rank& rs) {
        for (auto& kv : rs.reqs) req_unref(kv.second);
        rs.reqs.clear();
    }
    void stop_rank(i64 gid) { ranks[gid]->done = true; }
    void drop_rank(i64 gid) {
        Rank& rs = *ranks[gid];
        rs.alive = false;
        rs.done = true;
        clear_iteration(rs);
        for (auto& kv : rs.posted)
            for (i32 q : kv.second) req_unref(q);
        for (auto& kv : rs.unexpected)
            for (i32 mi : kv.second) msg_unref(mi);
        rs.posted.clear();
        rs.unexpected.clear();
        rs.ops.clear();
        rs.waits.clear();
        rs.pyops = py::object();
    }

    void start_iteration(double t, i64 gid, i64 it, py::sequence ops) {
        Rank& rs = *ranks[gid];
        rs.it = it;
        rs.ops.clear();
        rs.waits.clear();
        rs.pyops = ops;
        size_t n = py::len(ops);
        rs.ops.reserve(n);
        for (size_t i = 0; i < n; i++) {
            py::sequence op = py::reinterpret_borrow<py::sequence>(ops[i]);
            Op o{-1, 0, 0, 0, 0, 0.0, 0, 0};
            i64 k = op[0].cast<i64>();
            size_t m = py::len(op);
            if (k == COMPUTE && m == 2) {
                o.kind = COMPUTE;
                o.ns = op[1].cast<double>();
            } else if (k == ISEND && m == 5) {
                o.kind = ISEND;
                o.peer = op[1].cast<i64>();
                o.nbytes = op[2].cast<i64>();
                o.tag = op[3].cast<i64>();
                o.req = op[4].cast<i64>();
            } else if (k == IRECV && m == 4) {
                o.kind = IRECV;
                o.peer = op[1].cast<i64>();
                o.tag = op[2].cast<i64>();
                o.req = op[3].cast<i64>();
            } else if (k == SEND && m == 4) {
                o.kind = SEND;
                o.peer = op[1].cast<i64>();
                o.nbytes = op[2].cast<i64>();
                o.tag = op[3].cast<i64>();
            } else if (k == RECV && m == 3) {
                o.kind = RECV;
                o.peer = op[1].cast<i64>();
                o.tag = op[2].cast<i64>();
            } else if (k == WAITALL && m == 2) {
                o.kind = WAITALL;
                o.woff = (i32)rs.waits.size();
                for (auto w : py::reinterpret_borrow<py::iterable>(op[1])) rs.waits.push_back(w.cast<i64>());
                o.wn = (i32)rs.waits.size() - o.woff;
            }
            rs.ops.push_back(o);
        }
        rs.pc = 0;
        clear_iteration(rs);
        advance(t, gid);
    }

    // ---------------------------------------------------------------------------------------------- per-job bytes
    void count_bytes(i64 j) {
        if (j >= (i64)jbytes.size()) {
            jbytes.resize(j + 1);
            jb_on.resize(j + 1, false);
        }
        jbytes[j].assign(ports.size(), 0);
        jb_on[j] = true;
    }
    void forget_bytes(i64 j) {
        if (j < (i64)jbytes.size()) {
            jb_on[j] = false;
            std::vector<i64>().swap(jbytes[j]);
        }
    }
    py::object job_bytes(i64 j) {
        if (j < 0 || j >= (i64)jbytes.size() || !jb_on[j]) return py::none();
        return py::cast(jbytes[j]);
    }

    // network.py's loaded_ports and set_port_background in one (for performance: a predicted job's stand-in load
    // is set at each of its decisions and phases): ports ``pids`` under total loads ``utils``, from their nominal
    // values, numpy's float64 expressions in the same order (a load <= 0, or NaN's comparison, as np.where picks)
    std::vector<double> nom_nspb, nom_delay;
    double max_bg = 0.0;
    void set_port_loads(py::array_t<i64, py::array::c_style> pids_, py::array_t<double, py::array::c_style> u_) {
        if (pids_.ndim() != 1 || u_.ndim() != 1 || pids_.shape(0) != u_.shape(0))
            throw py::value_error("set_port_loads: two 1-d arrays of one length expected");
        auto pids = pids_.unchecked<1>();
        auto u = u_.unchecked<1>();
        const double Pd = (double)P;
        for (py::ssize_t i = 0; i < pids.shape(0); i++) {
            const i64 p = pids(i);
            if (p < 0 || p >= (i64)ports.size()) throw py::index_error("set_port_loads: no such port");
            const double s = nom_nspb[p], d = nom_delay[p], ui = u(i);
            if (ui <= 0.0) {
                ports[p].nspb = s;
                ports[p].delay = d;
            } else {
                const double um = (max_bg < ui) ? max_bg : ui;  // np.minimum (NaN stays NaN)
                ports[p].nspb = s / (1.0 - um);
                ports[p].delay = d + Pd * s * um / (2.0 * (1.0 - um));
            }
        }
    }
    void set_ports(const std::vector<i32>& pids, const std::vector<double>& nspb, const std::vector<double>& delay) {
        for (size_t i = 0; i < pids.size(); i++) {
            ports[pids[i]].nspb = nspb[i];
            ports[pids[i]].delay = delay[i];
        }
    }

    // ---------------------------------------------------------------------------------------------- counters
    template <class T, class F>
    py::array_t<T> per_port(F f) const {
        py::array_t<T> out(ports.size());
        auto w = out.mutable_unchecked();
        for (size_t i = 0; i < ports.size(); i++) w(i) = f(ports[i]);
        return out;
    }
    template <class T, class F>
    py::array_t<T> per_vc(F f) const {
        py::array_t<T> out(vcs.size());
        auto w = out.mutable_unchecked();
        for (size_t i = 0; i < vcs.size(); i++) w(i) = f(vcs[i]);
        return out;
    }
    // network.py's Network.counters(): the names of Network.COUNTERS, one array each (copied once per port sample)
    py::dict counters() const {
        py::dict d;
        d["bytes"] = per_port<i64>([](const Port& p) { return p.bytes; });
        d["pkts"] = per_port<i64>([](const Port& p) { return p.pkts; });
        d["stalled"] = per_port<i64>([](const Port& p) { return p.stalled; });
        d["busy_acc"] = per_port<double>([](const Port& p) { return p.busy_acc; });
        d["busy_start"] = per_port<double>([](const Port& p) { return p.busy_start; });
        d["qcount"] = per_port<i64>([](const Port& p) { return (i64)p.qcount; });
        d["port_occ"] = per_port<i64>([](const Port& p) { return (i64)p.occ; });
        d["nspb"] = per_port<double>([](const Port& p) { return p.nspb; });
        d["occ"] = per_vc<i64>([](const VC& v) { return (i64)v.occ; });
        d["occ_int"] = per_vc<double>([](const VC& v) { return v.occ_int; });
        d["occ_t"] = per_vc<double>([](const VC& v) { return v.occ_t; });
        return d;
    }
    // sampling.py's PortSampler.sample, its per-port arithmetic (for performance: a window is sampled every
    // interval, pure or hybrid, and the numpy version costs ~20 array operations on a few hundred ports): the same
    // float64 expressions in the same order, each cast to float32 into ``out`` (n_ports, 7 + 3 NV) as numpy's
    // assignment casts. ``prev`` (4, n_ports) and ``prev_int`` (n_ports, NV): the previous window's running values
    // (bytes, packets, busy, stalled; the VCs' occupancy integrals), replaced by this window's.
    // (c_style, no forcecast, noconvert at the binding: an array of another dtype or layout is refused, never
    // silently copied)
    using ArrD = py::array_t<double, py::array::c_style>;
    void sample_ports(double t, double win, ArrD bw_, ArrD cap_, ArrD prev_, ArrD prev_int_,
                      py::array_t<float, py::array::c_style> out_) {
        const size_t n = ports.size();
        const i32 F = 7 + 3 * NV;
        if (bw_.ndim() != 1 || (size_t)bw_.shape(0) != n || cap_.ndim() != 1 || (size_t)cap_.shape(0) != n ||
            prev_.ndim() != 2 || prev_.shape(0) != 4 || (size_t)prev_.shape(1) != n || prev_int_.ndim() != 2 ||
            (size_t)prev_int_.shape(0) != n || prev_int_.shape(1) != NV || out_.ndim() != 2 ||
            (size_t)out_.shape(0) != n || out_.shape(1) != F)
            throw py::value_error("sample_ports: arrays of the wrong shape");
        auto bw = bw_.unchecked<1>();
        auto cap = cap_.unchecked<1>();
        auto prev = prev_.mutable_unchecked<2>();
        auto pint = prev_int_.mutable_unchecked<2>();
        auto out = out_.mutable_unchecked<2>();
        const double Pd = (double)P;
        for (size_t i = 0; i < n; i++) {
            const Port& p = ports[i];
            const double by = (double)p.bytes, pk = (double)p.pkts, st = (double)p.stalled;
            const double busy = p.busy_acc + (p.busy_start >= 0 ? t - p.busy_start : 0.0);
            const double d_bytes = by - prev(0, i);
            out(i, 0) = (float)d_bytes;
            out(i, 1) = (float)(busy - prev(2, i));
            out(i, 2) = (float)(d_bytes / (bw(i) * win) * 100.0);
            out(i, 3) = (float)(st - prev(3, i));
            double tot = (double)vcs[i * NV].occ;
            for (i32 k = 1; k < NV; k++) tot += (double)vcs[i * NV + k].occ;
            out(i, 4) = (float)(tot * Pd);
            out(i, 5) = (float)((double)p.qcount * Pd);
            out(i, 6) = (float)(pk - prev(1, i));
            for (i32 k = 0; k < NV; k++) {
                const VC& v = vcs[i * NV + k];
                const double occ = (double)v.occ;
                const double integ = v.occ_int + occ * (t - v.occ_t);
                out(i, 7 + 3 * k) = (float)((integ - pint(i, k)) / win * Pd);
                out(i, 8 + 3 * k) = (float)(occ * Pd);
                out(i, 9 + 3 * k) = (float)((cap(i) - occ) * Pd);
                pint(i, k) = integ;
            }
            prev(0, i) = by;
            prev(1, i) = pk;
            prev(2, i) = busy;
            prev(3, i) = st;
        }
    }
    // ---------------------------------------------------------------------------------------------- port sampling
    // The engine's sampling event (Engine._sample) run here, for performance, when nobody reads the windows as the
    // run goes (no on_samples): each window's features computed by sample_ports into a buffer the PortSampler takes
    // over (sample_pull) at the end, no Python call per window. Same event, same place in the heap (one push per
    // window at t + interval while anything else is pending, as _sample's loop.at), same values. The window past
    // the limit goes to Python (``fallback``, the engine's _sample, which raises the limit error there).
    struct Sampling {
        bool on = false;
        bool keep = true;  // false: the windows' events run and count (limits, event order), their values are not kept
        double interval = 0.0, t0 = 0.0;
        i64 left = 0;  // windows before the limit
        py::array_t<double, py::array::c_style> bw, cap, prev, prev_int;
        py::object fallback;
        std::vector<double> t_end, win;
        // one buffer per window (no reallocation of what is kept: a run's windows can take a GB), freed as taken
        std::vector<std::vector<float>> rows;
    } smp;
    void sample_every(double first, double interval, double t0, i64 left, ArrD bw, ArrD cap, ArrD prev,
                      ArrD prev_int, py::object fallback, bool keep) {
        if (!(first >= 0.0) || !(interval > 0.0)) throw py::value_error("sample_every: bad times");
        smp.on = true;
        smp.keep = keep;
        smp.interval = interval;
        smp.t0 = t0;
        smp.left = left;
        smp.bw = std::move(bw);
        smp.cap = std::move(cap);
        smp.prev = std::move(prev);
        smp.prev_int = std::move(prev_int);
        smp.fallback = std::move(fallback);
        push(first, K_SAMPLE, 0);
    }
    void sample_event(double t) {
        if (smp.left <= 0) {  // the limit: Python says so (and may raise)
            flush_records();
            smp.fallback(t, py::none(), py::none());
            return;
        }
        const double win = t - smp.t0;
        if (win <= 0) throw py::value_error("empty sampling window");
        const size_t F = 7 + 3 * (size_t)NV, n = ports.size();
        if (smp.keep) {
            smp.rows.emplace_back(n * F);
            py::array_t<float, py::array::c_style> out({(py::ssize_t)n, (py::ssize_t)F}, smp.rows.back().data(),
                                                       py::none());
            sample_ports(t, win, smp.bw, smp.cap, smp.prev, smp.prev_int, out);
        }
        smp.t_end.push_back(t);
        smp.win.push_back(win);
        smp.t0 = t;
        smp.left--;
        if (!heap.empty()) push(t + smp.interval, K_SAMPLE, 0);
    }
    // the windows sampled since the last pull
    i64 sample_count() const { return (i64)smp.t_end.size(); }
    // those windows' values copied into ``out`` (sample_count(), n_ports, F) float32 -- (sample_count(), 0, F) where
    // the values are not kept; returns (t_end list, window lengths list); the buffer is emptied
    py::tuple sample_pull(py::array_t<float, py::array::c_style> out) {
        const size_t F = 7 + 3 * (size_t)NV, n = smp.keep ? ports.size() : 0, k = smp.t_end.size();
        if (out.ndim() != 3 || (size_t)out.shape(0) != k || (size_t)out.shape(1) != n || (size_t)out.shape(2) != F)
            throw py::value_error("sample_pull: an array of the wrong shape");
        float* dst = out.mutable_data();
        for (size_t m = 0; m < k && n; m++) {
            std::memcpy(dst + m * n * F, smp.rows[m].data(), n * F * sizeof(float));
            std::vector<float>().swap(smp.rows[m]);
        }
        py::tuple out_ = py::make_tuple(py::cast(smp.t_end), py::cast(smp.win));
        smp.t_end.clear();
        smp.win.clear();
        smp.rows.clear();
        return out_;
    }
    void sample_stop() {
        smp = Sampling();
    }
    i64 bytes_injected() const {
        i64 s = 0;
        for (auto& tm : terms) s += tm.bytes_in;
        return s;
    }
    i64 bytes_delivered() const {
        i64 s = 0;
        for (auto& tm : terms) s += tm.bytes_out;
        return s;
    }

    // ---------------------------------------------------------------------------------------------- debug checks
    // network.py's debug mode, same checks and messages (AssertionError): three handlers checked as they run, the
    // whole network by check_invariants, bytes still in flight by bytes_in_network
    [[noreturn]] static void fail(const std::string& msg) {
        PyErr_SetString(PyExc_AssertionError, msg.c_str());
        throw py::error_already_set();
    }
    void credit_checked(i32 vi) {
        const VC& vc = vcs[vi];
        i32 pid = vi / NV;
        if (!(0 <= vc.occ && vc.occ <= ports[pid].cap))
            fail("credit made occupancy of port " + std::to_string(pid) + " VC " + std::to_string(vi % NV) + " = " +
                 std::to_string(vc.occ));
    }
    void term_credit_checked(i32 ti) {
        if (!(0 <= terms[ti].occ && terms[ti].occ <= tcap))
            fail("terminal " + std::to_string(ti) + " credit counter " + std::to_string(terms[ti].occ));
    }
    void term_arrive_checked(i32 tid, i32 k) {
        if (pkts[k].dst != tid)
            fail("packet for terminal " + std::to_string(pkts[k].dst) + " delivered to " + std::to_string(tid));
        if (msgs[pkts[k].msg].left <= 0) fail("packet of an already delivered message");
    }
    void check_invariants() const {
        for (size_t pid = 0; pid < ports.size(); pid++) {
            const Port& pt = ports[pid];
            i64 s = 0, q = 0, n = 0;
            for (i32 v = 0; v < NV; v++) {
                const VC& vc = vcs[pid * NV + v];
                if (!(0 <= vc.occ && vc.occ <= pt.cap))
                    fail("port " + std::to_string(pid) + " VC " + std::to_string(v) + ": occupancy " +
                         std::to_string(vc.occ) + " outside 0.." + std::to_string(pt.cap));
                s += vc.occ;
                q += fifo_len(vc.ovf);
                n += fifo_len(vc.pend);
            }
            if (s != pt.occ)
                fail("port " + std::to_string(pid) + ": per-port occupancy " + std::to_string(pt.occ) +
                     " != sum over VCs " + std::to_string(s));
            if (q != pt.qcount)
                fail("port " + std::to_string(pid) + ": overflow count " + std::to_string(pt.qcount) + " != " +
                     std::to_string(q));
            if (n != pt.npend)
                fail("port " + std::to_string(pid) + ": pending count " + std::to_string(pt.npend) + " != " +
                     std::to_string(n));
        }
        for (size_t ti = 0; ti < terms.size(); ti++)
            if (!(0 <= terms[ti].occ && terms[ti].occ <= tcap))
                fail("terminal " + std::to_string(ti) + ": credit counter " + std::to_string(terms[ti].occ) +
                     " outside 0.." + std::to_string(tcap));
    }
    i64 fifo_len(const Fifo& f) const {
        i64 n = 0;
        for (i32 k = f.head; k >= 0; k = pkts.v[k].next) n++;
        return n;
    }
    i64 fifo_bytes(const Fifo& f) const {
        i64 b = 0;
        for (i32 k = f.head; k >= 0; k = pkts.v[k].next) b += pkts.v[k].size;
        return b;
    }
    i64 bytes_in_network() const {
        i64 total = 0;
        for (auto& tm : terms) total += fifo_bytes(tm.q);
        for (auto& vc : vcs) total += fifo_bytes(vc.pend) + fifo_bytes(vc.ovf);
        for (const auto* h : {&heap, &leftover})
            for (const Ev& e : *h)
                if (e.kind() == K_ARRIVE || e.kind() == K_TARRIVE) total += pkts.v[e.b].size;
        return total;
    }

    // ---------------------------------------------------------------------------------------------- RNG state
    void set_rng_state(const std::vector<i64>& st) { rng.set_state(st); }
    std::vector<i64> rng_state() const { return rng.state(); }
    void set_bg_rng_state(const std::vector<i64>& st) { bg_rng.set_state(st); }
    std::vector<i64> bg_rng_state() const { return bg_rng.state(); }
};

PYBIND11_MODULE(_core, m) {
    m.doc() = "Native core of hybridsim's embedded engine (event heap, network, MPI layer); see engine/cores.py";
    py::class_<Core>(m, "Core")
        .def(py::init<py::dict>())
        .def("at", &Core::at, py::arg("t"), py::arg("handler"), py::arg("a") = py::none(), py::arg("b") = py::none())
        .def("stop", &Core::stop)
        .def("run", &Core::run)
        .def_readonly("now", &Core::now)
        .def_readonly("events", &Core::events)
        .def_property_readonly("pending", [](const Core& c) { return c.heap.size(); })
        .def_readonly("packets", &Core::packets)
        .def_readonly("bytes_self", &Core::bytes_self)
        .def_readonly("messages", &Core::messages)
        .def("bytes_injected", &Core::bytes_injected)
        .def("bytes_delivered", &Core::bytes_delivered)
        .def("counters", &Core::counters)
        .def("sample_ports", &Core::sample_ports, py::arg("t"), py::arg("win"), py::arg("bw").noconvert(),
             py::arg("cap").noconvert(), py::arg("prev").noconvert(), py::arg("prev_int").noconvert(),
             py::arg("out").noconvert())
        .def("sample_every", &Core::sample_every, py::arg("first"), py::arg("interval"), py::arg("t0"),
             py::arg("left"), py::arg("bw").noconvert(), py::arg("cap").noconvert(), py::arg("prev").noconvert(),
             py::arg("prev_int").noconvert(), py::arg("fallback"), py::arg("keep") = true)
        .def("sample_count", &Core::sample_count)
        .def("sample_pull", &Core::sample_pull, py::arg("out").noconvert())
        .def("sample_stop", &Core::sample_stop)
        .def("check_invariants", &Core::check_invariants)
        .def("bytes_in_network", &Core::bytes_in_network)
        .def("set_ports", &Core::set_ports)
        .def("set_port_loads", &Core::set_port_loads, py::arg("pids").noconvert(), py::arg("utils").noconvert())
        .def("add_rank", &Core::add_rank)
        .def("drop_rank", &Core::drop_rank)
        .def("stop_rank", &Core::stop_rank)
        .def("start_iteration", &Core::start_iteration)
        .def("send_background", &Core::send_background)
        .def("start_background", &Core::start_background)
        .def("pred_job", &Core::pred_job)
        .def("forget_job", &Core::forget_job)
        .def("set_mode", &Core::set_mode)
        .def("park", &Core::park)
        .def("unpark", &Core::unpark)
        .def("pred_ends", &Core::pred_ends)
        .def("stretch", &Core::stretch)
        .def("stretch_state", &Core::stretch_state, py::arg("j"), py::arg("since") = -1)
        .def("cut", &Core::cut)
        .def("set_pred_callbacks", [](Core& c, py::object rec, py::object nxt, py::object parked, py::object type,
                                      py::list names) {
            c.on_records = std::move(rec);
            c.on_pred_next = std::move(nxt);
            c.on_parked = std::move(parked);
            c.set_record_type(type, names);
        })
        .def("set_bg_rng_state", &Core::set_bg_rng_state)
        .def("bg_rng_state", &Core::bg_rng_state)
        .def("count_bytes", &Core::count_bytes)
        .def("forget_bytes", &Core::forget_bytes)
        .def("job_bytes", &Core::job_bytes)
        .def("set_rng_state", &Core::set_rng_state)
        .def("rng_state", &Core::rng_state)
        .def("random", [](Core& c) { return c.rng.random(); })
        .def("randrange", [](Core& c, i64 n) { return c.rng.randbelow(n); })
        .def("noop", [](Core&) {});
}
