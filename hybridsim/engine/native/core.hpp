// The native core of the embedded engine: event heap, network and MPI layer of hybridsim/engine/{core,network,mpi}.py
// in C++, event for event. See hybridsim/engine/cores.py for how it is wired and docs in
// hybridsim/engine/README.md ("The native core").
//
// One class, Core, declared here with its model objects; its methods live one concern a file, compiled as one
// extension (setup.py): heap.cpp (the event heap and loop), network.cpp (routing, terminals, routers, credits,
// counters, debug checks), mpi.cpp (messages, ranks, background senders, per-job bytes), predicted.cpp (predicted
// iterations, fast-forward stretches, records), sampling.cpp (port samples) and bindings.cpp (the Python module).
// The hot helpers every file uses (heap push/pop, FIFOs, request references) are inline here.
// Why one header of this size (about 630 lines): the class and every model object it holds, declared once, plus
// those inline hot paths, which every translation unit must see to keep them inlined (for performance).
//
// The boundary refuses instead of crashing: every id, index, time and size a Python caller hands over is checked
// where it enters (IndexError for an id or index out of range, ValueError for a bad time, size or count); the
// checks are in the bound methods, never in the event handlers they schedule.
//
// Identity with the Python engine rests on three things, each kept exactly:
//  * one heap ordered by (time, seq) with one shared insertion counter, Python events (director, records, jobs,
//    sampling) included: the pop order is the Python engine's;
//  * the handlers below are line-by-line ports of network.py / mpi.py: same branches, same pushes in the same order,
//    same floating-point expressions in the same order (build with -ffp-contract=off, no -ffast-math);
//  * the random stream is CPython's MT19937 taken over from random.Random.getstate(), with CPython's random() and
//    randrange() (_randbelow_with_getrandbits) reproduced draw for draw.
#pragma once

#include <pybind11/pybind11.h>
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

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
        for (int i = 0; i < 624; i++)
            if (st[i] < 0 || st[i] > (int64_t)0xffffffffu)
                throw py::value_error("MT19937 state: word " + std::to_string(i) + " is not a 32-bit unsigned integer");
        if (st[624] < 0 || st[624] > 624) throw py::value_error("MT19937 state: the position must be in 0..624");
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
    double t_in = 0.0;  // arrival at its current router (a counted job's queued work: port_send)
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
    double start_t = 0.0;        // the start of the simulated iteration ``it`` (start_iteration)
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
// ------------------------------------------------------------------------------------------------ the boundary
// What a Python caller hands over is checked where it enters (the bound methods; see bindings.cpp), with the
// messages the Python core gives for the same inputs where it has the same door (EventLoop.at).
static const i64 EXACT_INT = (i64)1 << 53;  // integers from here on are not exact doubles
static const i64 MAX_ID = ((i64)1 << 31) - 1;  // rank global ids, job ids, iteration counts: 31 bits
// an id or index: IndexError unless 0 <= v < n
inline i64 check_index(i64 v, i64 n, const char* what) {
    if (v < 0 || v >= n)
        throw py::index_error(std::string(what) + " " + std::to_string(v) + " out of range (0.." +
                              std::to_string(n - 1) + ")");
    return v;
}
// a count or size: ValueError unless lo <= v <= hi
inline i64 check_range(i64 v, i64 lo, i64 hi, const char* what) {
    if (v < lo || v > hi)
        throw py::value_error(std::string(what) + " must be in " + std::to_string(lo) + ".." + std::to_string(hi) +
                              ", got " + std::to_string(v));
    return v;
}
// an event time: ValueError unless a number >= 0 ns (NaN refused; EventLoop.at's message)
inline double check_time(double t, const char* what = "event time") {
    if (!(t >= 0.0)) throw py::value_error(std::string(what) + " must be a number >= 0 ns, got " + std::to_string(t));
    return t;
}
// a duration or interval: ValueError unless finite and >= 0
inline double check_duration(double d, const char* what) {
    if (!(d >= 0.0) || !std::isfinite(d))
        throw py::value_error(std::string(what) + " must be a finite number >= 0 ns, got " + std::to_string(d));
    return d;
}
// an event time as Python hands it over (Core.at): a float, or an int below 2**53 (beyond it an int is not an exact
// double and the two cores would order it differently: EventLoop.at refuses it too), or anything float() takes
double event_time(py::handle t);
// an integer of an op list: a Python int in -2**53 .. 2**53 (ValueError beyond, TypeError for another type)
i64 op_int(py::handle v, const char* what);

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
    std::vector<std::vector<double>> jwork;    // per job: queued work per port integrated over time, ns^2
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
    i64 n_jobs = 0;  // 1 + the largest job id of an added rank: job ids beyond it are refused
    std::vector<i64> rb_gid, rb_it;
    std::vector<double> rb_t0, rb_t;
    py::object on_records, on_pred_next, on_parked;
    // the run's records in event order, one vector a field (29 bytes a record, no Python object): a simulated
    // iteration's as it ends (before the engine's Python hears of it), a predicted one's as it ends; the engine
    // takes them at the end of the run (take_records). A burst handed over (on_records) is the store's last rows
    std::vector<i32> rc_job, rc_rank, rc_it;
    std::vector<double> rc_t0, rc_t1;
    std::vector<int8_t> rc_sim;
    inline void keep_record(const Rank& rs, i64 it, double t0, double t1, bool sim) {
        rc_job.push_back((i32)rs.job);
        rc_rank.push_back((i32)rs.local);
        rc_it.push_back((i32)it);
        rc_t0.push_back(t0);
        rc_t1.push_back(t1);
        rc_sim.push_back(sim ? 1 : 0);
    }
    py::tuple take_records();
    py::tuple record_columns(i64 lo, i64 hi) const;
    Core(py::dict c);
    void check_tables() const;
    // ----------------------------------------------------------------------------------- event loop (heap.cpp)
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
    void at(py::handle when, py::object h, py::object x, py::object y);
    void stop();
    void dispatch(const Ev& e);
    bool run(double until, i64 max_events, py::object on_check, i64 check_every);
    // ---------------------------------------------------------------------------- predicted iterations (predicted.cpp)
    void pred_job(i64 j, i64 iters, i64 n_ranks);
    void forget_job(i64 j);
    void set_mode(i64 j, i64 it, bool predict);
    py::object park(i64 j, i64 it, i64 gid, double t);
    void unpark(i64 j);
    void pred_ends(const std::vector<i64>& gids, const std::vector<i64>& its, const std::vector<double>& t0s,
                   const std::vector<double>& ends);
    void pred_end(double t, i32 gid);
    void stretch_ends(JobPred& J, i64 it);
    void stretch(i64 j, i64 first, py::array_t<double, py::array::c_style | py::array::forcecast> dur);
    py::object stretch_state(i64 j, i64 since);
    void cut(i64 j, i64 h);
    // hand the buffered records over (on_records, as columns) before any Python code runs
    inline void flush_records() {
        if (!rb_gid.empty()) flush_records_now();
    }
    void flush_records_now();
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
    // -------------------------------------------------------------------------------- routing (network.cpp)
    inline i32 randrange(i64 n) { return (i32)rng.randbelow(n); }
    inline i32 score(i32 pid) const { return ports[pid].occ + ports[pid].qcount; }
    inline i32 pick(const i32* c, i32 n) { return n > 1 ? c[randrange(n)] : c[0]; }
    i32 draw_igroup(i32 sg, i32 dg);
    i32 best_global(const i32* c, i32 n);
    i32 best_local(const i32* c, i32 n);
    inline i32 gpn(i32 r, i32 G) const { return gp_len[(size_t)r * g + G]; }
    inline const i32* gpc(i32 r, i32 G) const { return gp_ports.data() + gp_off[(size_t)r * g + G]; }
    inline i32 lgn(i32 r, i32 G) const { return lg_len[(size_t)r * g + G]; }
    inline const i32* lgc(i32 r, i32 G) const { return lg_ports.data() + lg_off[(size_t)r * g + G]; }
    [[noreturn]] void no_route(i32 r, i32 G);
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
    i32 prog_adaptive(i32 r, i32 pki, bool at_source, i32 dg);
    i32 ugal(i32 r, i32 pki, bool at_source, i32 dg);
    i32 route(i32 r, i32 pki);
    // -------------------------------------------------------------------------------- terminals (network.cpp)
    void inject(double t, i32 mi);
    void term_send(double t, i32 ti);

    void local_done(double t, i32 mi) { on_local(t, mi); }
    void term_credit(double t, i32 ti);
    void term_arrive(double t, i32 tid, i32 k);
    // -------------------------------------------------------------------------------- routers (network.cpp)
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
    void router_arrive(double t, i32 r, i32 k);
    void port_send(double t, i32 pid);
    void credit_up(double t, i32 k);
    void credit(double t, i32 vi);
    // ------------------------------------------------------------------------------------ MPI layer (mpi.cpp)
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
    Rank* rank_of(i64 gid) {  // a live rank, or nullptr
        if (gid < 0 || gid >= (i64)ranks.size() || !ranks[gid] || !ranks[gid]->alive) return nullptr;
        return ranks[gid].get();
    }
    void post(double t, i32 kind, i64 src, i64 dst, i64 tag, i64 size, i64 wire, i32 st, i32 dt, i32 sreq, i32 rreq,
              i32 jb);

    // the job's per-port byte counters its messages carry (mpi.py's jb.get(job)): its id when counted, else -1
    inline i32 counted(i64 job) const { return (job < (i64)jb_on.size() && jb_on[job]) ? (i32)job : -1; }
    void send(double t, Rank& rs, i64 dst, i64 nbytes, i64 tag, i32 rq);
    void send_background(double t, i64 gid, i64 dst, i64 nbytes);
    void start_background(double t, i64 gid, i64 n, i64 nbytes, double interval);
    void bg_send(double t, i32 gid);
    void on_local(double t, i32 mi);
    void on_deliver(double t, i32 mi);
    void ack(double t, i32 mi, i32 rreq);
    void irecv(double t, Rank& rs, i64 src, i64 tag, i32 rq);
    void complete(double t, i32 q);
    void set_req(Rank& rs, i64 id, i32 q);
    void advance(double t, i64 gid);
    // ------------------------------------------------------------------------------------- ranks from Python (mpi.cpp)
    void add_rank(i64 gid, i64 job, i64 local, i64 term);
    void clear_iteration(Rank& rs);
    Rank& added_rank(i64 gid);  // IndexError unless a rank with this id was added (live or dropped)
    void stop_rank(i64 gid);
    void drop_rank(i64 gid);
    void start_iteration(double t, i64 gid, i64 it, py::sequence ops);
    // --------------------------------------------------- per-job bytes (mpi.cpp) and stand-in loads (network.cpp)
    void count_bytes(i64 j);
    void forget_bytes(i64 j);
    py::object job_bytes(i64 j);
    py::object job_work(i64 j);

    // network.py's loaded_ports and set_port_background in one (for performance: a predicted job's stand-in load
    // is set at each of its decisions and phases): ports ``pids`` under total loads ``utils`` (and, unless None,
    // the predicted jobs' queued work ``backlog`` there, ns, the wait instead of M/D/1's), from their nominal
    // values, numpy's float64 expressions in the same order (a load <= 0, or NaN's comparison, as np.where picks)
    std::vector<double> nom_nspb, nom_delay;
    double max_bg = 0.0;
    void set_port_loads(py::array_t<i64, py::array::c_style> pids_, py::array_t<double, py::array::c_style> u_,
                        py::object backlog_);
    // -------------------------------------------------------------------------------- counters (network.cpp)
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
    py::dict counters() const;
    // sampling.py's PortSampler.sample, its per-port arithmetic (for performance: a window is sampled every
    // interval, pure or hybrid, and the numpy version costs ~20 array operations on a few hundred ports): the same
    // float64 expressions in the same order, each cast to float32 into ``out`` (n_ports, 7 + 3 NV) as numpy's
    // assignment casts. ``prev`` (4, n_ports) and ``prev_int`` (n_ports, NV): the previous window's running values
    // (bytes, packets, busy, stalled; the VCs' occupancy integrals), replaced by this window's.
    // (c_style, no forcecast, noconvert at the binding: an array of another dtype or layout is refused, never
    // silently copied)
    using ArrD = py::array_t<double, py::array::c_style>;
    void check_sample_arrays(const ArrD& bw, const ArrD& cap, const ArrD& prev, const ArrD& prev_int) const;
    void sample_ports(double t, double win, ArrD bw_, ArrD cap_, ArrD prev_, ArrD prev_int_,
                      py::array_t<float, py::array::c_style> out_);
    // ------------------------------------------------------------------------------- port sampling (sampling.cpp)
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
    void sample_every(double first, double interval, double t0, i64 left, ArrD bw, ArrD cap, ArrD prev, ArrD prev_int,
                      py::object fallback, bool keep = true);
    void sample_event(double t);
    // the windows sampled since the last pull
    i64 sample_count() const { return (i64)smp.t_end.size(); }
    py::tuple sample_pull(py::array_t<float, py::array::c_style> out);
    void sample_stop();
    i64 bytes_injected() const;
    i64 bytes_delivered() const;
    // -------------------------------------------------------------------------------- debug checks (network.cpp)
    [[noreturn]] static void fail(const std::string& msg);
    void credit_checked(i32 vi);
    void term_credit_checked(i32 ti);
    void term_arrive_checked(i32 tid, i32 k);
    void check_invariants() const;
    i64 fifo_len(const Fifo& f) const;
    i64 fifo_bytes(const Fifo& f) const;
    i64 bytes_in_network() const;
    // ---------------------------------------------------------------------------------------------- RNG state
    void set_rng_state(const std::vector<i64>& st) { rng.set_state(st); }
    std::vector<i64> rng_state() const { return rng.state(); }
    void set_bg_rng_state(const std::vector<i64>& st) { bg_rng.set_state(st); }
    std::vector<i64> bg_rng_state() const { return bg_rng.state(); }
    // --------------------------------------------------------------------- the cyclic garbage collector (bindings.cpp)
    // The Python objects the core holds (the handlers on its heap, the ranks' op lists, the engine's callbacks) refer
    // back to the objects that hold the core, so a finished run's core is in a cycle: the core is a GC type, and these
    // two let the collector see and break it (without them the cycle, and the whole network, outlives the run).
    int py_traverse(visitproc visit, void* arg) const;
    void py_clear();
};
