// Port sampling: sampling.py's per-port features (sample_ports) and the engine's sampling event run in C++.
#include "core.hpp"

// the sampler's running arrays: bw and cap (n_ports), prev (4, n_ports), prev_int (n_ports, NV)
void Core::check_sample_arrays(const ArrD& bw, const ArrD& cap, const ArrD& prev, const ArrD& prev_int) const {
    const size_t n = ports.size();
    if (bw.ndim() != 1 || (size_t)bw.shape(0) != n || cap.ndim() != 1 || (size_t)cap.shape(0) != n ||
        prev.ndim() != 2 || prev.shape(0) != 4 || (size_t)prev.shape(1) != n || prev_int.ndim() != 2 ||
        (size_t)prev_int.shape(0) != n || prev_int.shape(1) != NV)
        throw py::value_error("sample_ports: arrays of the wrong shape");
}

void Core::sample_ports(double t, double win, ArrD bw_, ArrD cap_, ArrD prev_, ArrD prev_int_,
                        py::array_t<float, py::array::c_style> out_) {
    const size_t n = ports.size();
    const i32 F = 7 + 3 * NV;
    check_sample_arrays(bw_, cap_, prev_, prev_int_);
    if (out_.ndim() != 2 || (size_t)out_.shape(0) != n || out_.shape(1) != F)
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

void Core::sample_every(double first, double interval, double t0, i64 left, ArrD bw, ArrD cap, ArrD prev, ArrD prev_int,
                        py::object fallback, bool keep) {
    if (!(first >= 0.0) || !(interval > 0.0) || !std::isfinite(t0)) throw py::value_error("sample_every: bad times");
    check_sample_arrays(bw, cap, prev, prev_int);
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

void Core::sample_event(double t) {
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

// those windows' values copied into ``out`` (sample_count(), n_ports, F) float32 -- (sample_count(), 0, F) where
// the values are not kept; returns (t_end list, window lengths list); the buffer is emptied
py::tuple Core::sample_pull(py::array_t<float, py::array::c_style> out) {
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

void Core::sample_stop() {
    smp = Sampling();
}
