// The event heap: Core::at (Python events), stop, dispatch (one event to its handler) and run (EventLoop.run).
#include "core.hpp"

void Core::at(py::handle when, py::object h, py::object x, py::object y) {
    const double t = event_time(when);
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

void Core::stop() {
    stopped = true;
    leftover.insert(leftover.end(), heap.begin(), heap.end());
    heap.clear();
}

void Core::dispatch(const Ev& e) {
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
bool Core::run(double until, i64 max_events, py::object on_check, i64 check_every) {
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
