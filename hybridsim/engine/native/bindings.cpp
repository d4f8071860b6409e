// The Python bindings of the native core: every argument checked here or in the method it calls.
#include "core.hpp"

double event_time(py::handle when) {
    PyObject* o = when.ptr();
    double t;
    if (PyFloat_Check(o)) {
        t = PyFloat_AS_DOUBLE(o);
    } else if (PyLong_Check(o)) {
        int overflow = 0;
        const long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
        if (v == -1 && PyErr_Occurred()) throw py::error_already_set();
        if (overflow > 0 || v >= EXACT_INT)
            throw py::value_error("event time must be below 2**53 ns when an integer (beyond, it is not an exact "
                                  "double), got " + py::repr(when).cast<std::string>());
        t = overflow < 0 ? -1.0 : (double)v;
    } else {
        t = PyFloat_AsDouble(o);
        if (t == -1.0 && PyErr_Occurred()) throw py::error_already_set();
    }
    if (!(t >= 0.0))
        throw py::value_error("event time must be a number >= 0 ns, got " + py::repr(when).cast<std::string>());
    return t;
}

i64 op_int(py::handle v, const char* what) {
    PyObject* idx = PyNumber_Index(v.ptr());  // an int, or what has __index__ (numpy's integers); TypeError else
    if (!idx) throw py::error_already_set();
    int overflow = 0;
    const long long x = PyLong_AsLongLongAndOverflow(idx, &overflow);
    Py_DECREF(idx);
    if (x == -1 && PyErr_Occurred()) throw py::error_already_set();
    if (overflow || x >= EXACT_INT || x <= -EXACT_INT)
        throw py::value_error(std::string(what) + " must be an integer in -2**53..2**53, got " +
                              py::repr(v).cast<std::string>());
    return x;
}

int Core::py_traverse(visitproc visit, void* arg) const {
    for (const PySlot& s : pyslots) {
        Py_VISIT(s.h.ptr());
        Py_VISIT(s.a.ptr());
        Py_VISIT(s.b.ptr());
    }
    for (const auto& r : ranks)
        if (r) Py_VISIT(r->pyops.ptr());
    for (const py::object* o : {&on_iteration_end, &raise_limit, &on_records, &on_pred_next, &on_parked, &smp.fallback})
        Py_VISIT(o->ptr());
    return 0;
}

void Core::py_clear() {  // what may refer back to the core; the slots stay (indices on the heap), emptied
    for (PySlot& s : pyslots) s.h = s.a = s.b = py::object();
    for (auto& r : ranks)
        if (r) r->pyops = py::object();
    for (py::object* o : {&on_iteration_end, &raise_limit, &on_records, &on_pred_next, &on_parked, &smp.fallback})
        *o = py::object();
}

// the Core behind a Python object, or nullptr while its C++ object is not made yet (between allocation and __init__)
static Core* core_of(PyObject* self) {
    auto* inst = reinterpret_cast<py::detail::instance*>(self);
    auto vh = py::detail::values_and_holders(inst).begin();
    return vh->holder_constructed() ? vh->template value_ptr<Core>() : nullptr;
}

PYBIND11_MODULE(_core, m) {
    m.doc() = "Native core of hybridsim's embedded engine (event heap, network, MPI layer); see engine/cores.py";
    // a GC type (Core::py_traverse, py_clear): a finished run's engine, which refers to its core and is referred to by
    // the handlers the core holds, is collected as any other cycle
    py::class_<Core>(m, "Core", py::custom_type_setup([](PyHeapTypeObject* heap_type) {
        auto* type = &heap_type->ht_type;
        type->tp_flags |= Py_TPFLAGS_HAVE_GC;
        type->tp_traverse = [](PyObject* self, visitproc visit, void* arg) {
            Py_VISIT(Py_TYPE(self));  // a heap type's instances own a reference to it (Python >= 3.9)
            const Core* c = core_of(self);
            return c ? c->py_traverse(visit, arg) : 0;
        };
        type->tp_clear = [](PyObject* self) {
            if (Core* c = core_of(self)) c->py_clear();
            return 0;
        };
    }))
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
        .def("set_port_loads", &Core::set_port_loads, py::arg("pids").noconvert(), py::arg("utils").noconvert(),
             py::arg("backlog") = py::none())
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
        .def("set_pred_callbacks", [](Core& c, py::object rec, py::object nxt, py::object parked) {
            for (auto* f : {&rec, &nxt, &parked})
                if (!PyCallable_Check(f->ptr())) throw py::type_error("set_pred_callbacks: three callables expected");
            c.on_records = std::move(rec);
            c.on_pred_next = std::move(nxt);
            c.on_parked = std::move(parked);
        })
        .def("take_records", &Core::take_records)
        .def("record_columns", &Core::record_columns)
        .def("set_bg_rng_state", &Core::set_bg_rng_state)
        .def("bg_rng_state", &Core::bg_rng_state)
        .def("count_bytes", &Core::count_bytes)
        .def("forget_bytes", &Core::forget_bytes)
        .def("job_bytes", &Core::job_bytes)
        .def("job_work", &Core::job_work)
        .def("set_rng_state", &Core::set_rng_state)
        .def("rng_state", &Core::rng_state)
        .def("random", [](Core& c) { return c.rng.random(); })
        .def("randrange", [](Core& c, i64 n) {
            check_range(n, 1, (i64)1 << 32, "randrange's bound");  // CPython: empty range for n < 1
            return c.rng.randbelow(n);
        })
        .def("noop", [](Core&) {});
}
