// Predicted iterations: the engine's parking and ends of predicted iterations, fast-forward stretches and the
// records handed over in bursts (engine.py's _pred_end / _iter_start parking, mpi.py's stretch).
#include "core.hpp"

void Core::pred_job(i64 j, i64 iters, i64 n_ranks) {
    check_index(j, n_jobs, "job (of no added rank)");
    check_range(iters, 0, MAX_ID, "iterations");
    check_range(n_ranks, 0, MAX_ID, "ranks");
    if (j >= (i64)jp.size()) jp.resize(j + 1);
    JobPred& J = jp[j];
    J = JobPred();
    J.iters = iters;
    J.n_ranks = n_ranks;
    J.modes.assign(iters, -1);
    J.clear_park();
}

void Core::forget_job(i64 j) {
    if (j >= 0 && j < (i64)jp.size()) jp[j] = JobPred();
}

void Core::set_mode(i64 j, i64 it, bool predict) {
    JobPred& J = jp[check_index(j, (i64)jp.size(), "job (no pred_job)")];
    if (it >= 0 && it < (i64)J.modes.size()) J.modes[it] = predict ? 1 : 0;
}

// _iter_start's parking: rank gid is at iteration it (predicted) from t; returns (gids, times) once every rank
// of the job is parked (and forgets them), else None
py::object Core::park(i64 j, i64 it, i64 gid, double t) {
    JobPred& J = jp[check_index(j, (i64)jp.size(), "job (no pred_job)")];
    const Rank* rs = rank_of(gid);
    if (!rs) throw py::index_error("park: no live rank with global id " + std::to_string(gid));
    if (rs->job != j)
        throw py::value_error("park: rank " + std::to_string(gid) + " is not of job " + std::to_string(j));
    check_time(t);
    if (!J.add_park(it, gid, t)) return py::none();
    py::object out = py::make_tuple(py::cast(J.park_gid), py::cast(J.park_t));
    J.clear_park();
    return out;
}

void Core::unpark(i64 j) {
    if (j >= 0 && j < (i64)jp.size()) jp[j].clear_park();
}

// _predict's scheduling: rank gids[k] ends its predicted iteration its[k] (started at t0s[k]) at ends[k]
void Core::pred_ends(const std::vector<i64>& gids, const std::vector<i64>& its, const std::vector<double>& t0s,
                     const std::vector<double>& ends) {
    if (its.size() != gids.size() || t0s.size() != gids.size() || ends.size() != gids.size())
        throw py::value_error("pred_ends: four lists of one length expected");
    if (!on_records) throw py::value_error("pred_ends: set_pred_callbacks first");
    for (size_t k = 0; k < gids.size(); k++) {
        Rank* rs = rank_of(gids[k]);
        if (!rs) throw py::key_error(std::to_string(gids[k]));
        check_time(ends[k]);
        rs->it = its[k];
        rs->pred_t0 = t0s[k];
        push(ends[k], K_PRED, (i32)gids[k]);
    }
}

// _pred_end: the record (buffered), then _iter_start: parked here when the next iteration is known to be
// predicted, else Python's _iter_start (on_pred_next) once the records are handed over
void Core::pred_end(double t, i32 gid) {
    Rank* rs = ranks[gid].get();
    if (rs->done) return;  // its job was killed at its walltime
    rb_gid.push_back(gid);
    rb_it.push_back(rs->it);
    rb_t0.push_back(rs->pred_t0);
    rb_t.push_back(t);
    keep_record(*rs, rs->it, rs->pred_t0, t, false);
    i64 it = ++rs->it;
    if (rs->job >= (i64)jp.size()) jp.resize(rs->job + 1);  // a job without pred_job: nothing decided
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
void Core::stretch_ends(JobPred& J, i64 it) {
    i64 n = J.n_ranks;
    std::vector<double> t0(n, 0.0);
    std::vector<i64> gid(n, -1);
    for (size_t k = 0; k < J.park_gid.size(); k++) {
        Rank* rs = ranks[J.park_gid[k]].get();
        if (rs->local < 0 || rs->local >= n || gid[rs->local] >= 0)
            throw py::value_error("a stretch's ranks must have the local ids 0.." + std::to_string(n - 1) +
                                  ", once each");
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
void Core::stretch(i64 j, i64 first, py::array_t<double, py::array::c_style | py::array::forcecast> dur) {
    JobPred& J = jp[check_index(j, (i64)jp.size(), "job (no pred_job)")];
    if (!on_records) throw py::value_error("stretch: set_pred_callbacks first");
    if (dur.ndim() != 2 || dur.shape(1) != J.n_ranks)
        throw py::value_error("a stretch is (iterations, ranks) durations, one per rank");
    i64 h = (i64)dur.shape(0);
    if (first < 0 || first > J.iters - h) throw py::value_error("stretch beyond the job's iterations");
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
py::object Core::stretch_state(i64 j, i64 since) {
    JobPred& J = jp[check_index(j, (i64)jp.size(), "job (no pred_job)")];
    py::object b = py::none();
    if (J.ff_dec > 0 && J.ff_dec > since && counted(j) >= 0) b = py::cast(J.ff_bytes);
    return py::make_tuple(J.ff_dec, J.ff_pred, J.ff_t, b);
}

// shorten the stretch to its first h iterations (at least the reached ones): the others are undecided again
void Core::cut(i64 j, i64 h) {
    if (j < 0 || j >= (i64)jp.size()) return;
    JobPred& J = jp[j];
    h = std::min(std::max(h, J.ff_dec), J.ff_h);
    for (i64 it = J.ff_first + h; it < J.ff_first + J.ff_h; it++) J.modes[it] = -1;
    J.ff_h = std::min(J.ff_h, h);
}

// hand the buffered records over: on_records((lo, hi), {job: count}, spans) in event order, (lo, hi) the rows of the
// record store they are (its last ones: a simulated record is kept after the flush before it), read from Python
// only by whoever reads them (record_columns)
void Core::flush_records_now() {
    std::vector<i64> g, it;
    std::vector<double> t0, t1;
    g.swap(rb_gid);
    it.swap(rb_it);
    t0.swap(rb_t0);
    t1.swap(rb_t);
    size_t n = g.size();
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
    i64 hi = (i64)rc_sim.size();
    on_records(py::make_tuple(hi - (i64)n, hi), counts, sp);
}

template <class T>
static py::array_t<T> owned(std::vector<T>&& v) {  // a numpy array that owns the vector's memory (no copy)
    auto* p = new std::vector<T>(std::move(v));
    py::capsule own(p, [](void* q) { delete reinterpret_cast<std::vector<T>*>(q); });
    return py::array_t<T>({(py::ssize_t)p->size()}, {(py::ssize_t)sizeof(T)}, p->data(), own);
}

// the record store as (job ids, ranks, iterations, starts, ends, simulated) arrays, handed over without a copy; the
// store is empty after
py::tuple Core::take_records() {
    flush_records();
    py::tuple out = py::make_tuple(owned(std::move(rc_job)), owned(std::move(rc_rank)), owned(std::move(rc_it)),
                                   owned(std::move(rc_t0)), owned(std::move(rc_t1)), owned(std::move(rc_sim)));
    rc_job.clear(), rc_rank.clear(), rc_it.clear(), rc_t0.clear(), rc_t1.clear(), rc_sim.clear();
    return out;
}

// rows lo .. hi - 1 of the store, copied, as take_records gives them (a burst for a director that reads it)
py::tuple Core::record_columns(i64 lo, i64 hi) const {
    i64 n = (i64)rc_sim.size();
    if (lo < 0 || hi < lo || hi > n) throw py::index_error("record_columns: rows outside the store");
    auto cut = [&](const auto& v) {
        using T = typename std::decay_t<decltype(v)>::value_type;
        return py::array_t<T>((py::ssize_t)(hi - lo), v.data() + lo);
    };
    return py::make_tuple(cut(rc_job), cut(rc_rank), cut(rc_it), cut(rc_t0), cut(rc_t1), cut(rc_sim));
}
