// The network: configuration, routing, terminals, routers and credits (network.py, line by line), the stand-in
// load of ports, the counters and the debug checks.
#include "core.hpp"

Core::Core(py::dict c) {
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
    check_range(a, 1, MAX_ID, "config a (routers per group)");
    check_range(p_per_r, 1, MAX_ID, "config p (terminals per router)");
    check_range(g, 1, MAX_ID, "config g (groups)");
    check_range(NV, 2, 64, "config nv (virtual channels)");
    check_range(P, 1, MAX_ID, "config P (packet size)");
    check_range(mode, MINIMAL, PROG_ADAPTIVE, "config routing");
    check_range(tcap, 0, MAX_ID, "config tcap");
    check_duration(cdelay, "config credit_delay");
    check_duration(t_nspb, "config t_nspb");
    check_duration(t_lat, "config t_lat");
    if (n > (size_t)MAX_ID / 64) throw py::value_error("config: too many ports");
    for (auto* v : {&nspb, &delay, &nom_nspb, &nom_delay})
        if (v->size() != n) throw py::value_error("config: every per-port list must have one entry per port");
    if (dest.size() != n || to_term.size() != n || local.size() != n)
        throw py::value_error("config: every per-port list must have one entry per port");
    for (size_t i = 0; i < n; i++) {
        check_range(cap[i], 0, MAX_ID, "config cap");
        check_duration(nspb[i], "config nspb");
        check_duration(delay[i], "config delay");
    }
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
    check_tables();
}

// the routing tables index one another and the ports: every index in range, or the constructor refuses them
void Core::check_tables() const {
    const i64 n = (i64)ports.size(), R = (i64)a * g, T = (i64)terms.size();
    if (T != R * p_per_r) throw py::value_error("config: term_router must have a * g * p entries");
    for (size_t i = 0; i < ports.size(); i++)
        check_index(ports[i].dest, ports[i].to_term ? T : R, "config dest of a port:");
    for (const Term& tm : terms) check_index(tm.router, R, "config term_router: router");
    if ((i64)tvc.size() != T) throw py::value_error("config: tvc must have one entry per terminal");
    for (i32 v : tvc) check_index(v, n * NV, "config tvc: port VC");
    if ((i64)lport.size() != R * a) throw py::value_error("config: lport must have a entries per router");
    for (i64 r = 0; r < R; r++)
        for (i64 j = 0; j < a; j++)
            if (j != r % a) check_index(lport[r * a + j], n, "config lport: port");
    auto lists = [&](const std::vector<i32>& off, const std::vector<i32>& len, const std::vector<i32>& items,
                     i64 rows, i64 bound, const char* what) {
        if ((i64)off.size() != rows || (i64)len.size() != rows)
            throw py::value_error(std::string("config: ") + what + " offsets and lengths must have " +
                                  std::to_string(rows) + " entries");
        for (i64 k = 0; k < rows; k++) {
            if (off[k] < 0 || len[k] < 0 || (i64)off[k] + len[k] > (i64)items.size())
                throw py::index_error(std::string("config: ") + what + " list " + std::to_string(k) +
                                      " runs outside its table");
        }
        for (i32 v : items) check_index(v, bound, (std::string("config ") + what + ":").c_str());
    };
    lists(gp_off, gp_len, gp_ports, R * g, n, "gp_ports");
    lists(lg_off, lg_len, lg_ports, R * g, n, "lg_ports");
    lists(reach_off, reach_len, reach_g, R, g, "reach_g");
}

i32 Core::draw_igroup(i32 sg, i32 dg) {
    if (g <= 2 || sg == dg) return -1;
    i32 lo = sg < dg ? sg : dg, hi = sg < dg ? dg : sg;
    i32 k = randrange(g - 2);
    if (k >= lo) k += 1;
    if (k >= hi) k += 1;
    return k;
}

i32 Core::best_global(const i32* c, i32 n) {
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

i32 Core::best_local(const i32* c, i32 n) {
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

void Core::no_route(i32 r, i32 G) {
    throw py::key_error("no route from router " + std::to_string(r) + " to group " + std::to_string(G));
}

i32 Core::prog_adaptive(i32 r, i32 pki, bool at_source, i32 dg) {
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

i32 Core::ugal(i32 r, i32 pki, bool at_source, i32 dg) {
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
i32 Core::route(i32 r, i32 pki) {
    Pkt* pk = &pkts[pki];
    i32 dr = pk->dst_router;
    if (r == dr) {
        if (pk->src_group == pk->dst_group) return tvc[pk->dst] - vc_dest + pk->lhops;  // never left its group
        return tvc[pk->dst];
    }
    i32 c = r / a;
    i32 dg = pk->dst_group;
    if (c == dg) {
        i32 lp = lport[(size_t)r * a + dr % a];
        if (c == pk->src_group) {  // the same: VC = local hops taken (0), then one local hop taken
            pk->lhops = 1;
            return lp * NV;
        }
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

void Core::inject(double t, i32 mi) {
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

void Core::term_send(double t, i32 ti) {
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

void Core::term_credit(double t, i32 ti) {
    terms[ti].occ -= 1;
    if (!terms[ti].sched) term_send(t, ti);
}

void Core::term_arrive(double t, i32 tid, i32 k) {
    credit_up(t, k);
    terms[tid].bytes_out += pkts[k].size;
    i32 mi = pkts[k].msg;
    pkts.release(k);
    msgs[mi].left -= 1;
    if (msgs[mi].left == 0) on_deliver(t, mi);
}

void Core::router_arrive(double t, i32 r, i32 k) {
    pkts[k].t_in = t;
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

void Core::port_send(double t, i32 pid) {
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
    if (jb >= 0 && jb_on[jb]) {
        jbytes[jb][pid] += size;
        const double sv = size * port.nspb;  // its service time; its work in the queue since t_in, then draining
        jwork[jb][pid] += sv * (t - pkts[k].t_in) + 0.5 * sv * sv;
    }
    push(end + port.delay, port.to_term ? K_TARRIVE : K_ARRIVE, port.dest, k);
    if (n) {
        port.sched = true;
        push(end, K_PORT, pid);
    }
}

void Core::credit_up(double t, i32 k) {
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

void Core::credit(double t, i32 vi) {
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

void Core::set_port_loads(py::array_t<i64, py::array::c_style> pids_, py::array_t<double, py::array::c_style> u_,
                          py::object backlog_) {
    if (pids_.ndim() != 1 || u_.ndim() != 1 || pids_.shape(0) != u_.shape(0))
        throw py::value_error("set_port_loads: two 1-d arrays of one length expected");
    const bool has_w = !backlog_.is_none();
    py::array_t<double, py::array::c_style> w_;
    if (has_w) {
        w_ = backlog_.cast<py::array_t<double, py::array::c_style>>();
        if (w_.ndim() != 1 || w_.shape(0) != u_.shape(0))
            throw py::value_error("set_port_loads: backlog must be a 1-d array as long as utils");
    }
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
            ports[p].delay = has_w ? d + w_.data()[i] : d + Pd * s * um / (2.0 * (1.0 - um));
        }
    }
}

// network.py's Network.counters(): the names of Network.COUNTERS, one array each (copied once per port sample)
py::dict Core::counters() const {
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

i64 Core::bytes_injected() const {
    i64 s = 0;
    for (auto& tm : terms) s += tm.bytes_in;
    return s;
}

i64 Core::bytes_delivered() const {
    i64 s = 0;
    for (auto& tm : terms) s += tm.bytes_out;
    return s;
}

// network.py's debug mode, same checks and messages (AssertionError): three handlers checked as they run, the
// whole network by check_invariants, bytes still in flight by bytes_in_network
void Core::fail(const std::string& msg) {
    PyErr_SetString(PyExc_AssertionError, msg.c_str());
    throw py::error_already_set();
}

void Core::credit_checked(i32 vi) {
    const VC& vc = vcs[vi];
    i32 pid = vi / NV;
    if (!(0 <= vc.occ && vc.occ <= ports[pid].cap))
        fail("credit made occupancy of port " + std::to_string(pid) + " VC " + std::to_string(vi % NV) + " = " +
             std::to_string(vc.occ));
}

void Core::term_credit_checked(i32 ti) {
    if (!(0 <= terms[ti].occ && terms[ti].occ <= tcap))
        fail("terminal " + std::to_string(ti) + " credit counter " + std::to_string(terms[ti].occ));
}

void Core::term_arrive_checked(i32 tid, i32 k) {
    if (pkts[k].dst != tid)
        fail("packet for terminal " + std::to_string(pkts[k].dst) + " delivered to " + std::to_string(tid));
    if (msgs[pkts[k].msg].left <= 0) fail("packet of an already delivered message");
}

void Core::check_invariants() const {
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

i64 Core::fifo_len(const Fifo& f) const {
    i64 n = 0;
    for (i32 k = f.head; k >= 0; k = pkts.v[k].next) n++;
    return n;
}

i64 Core::fifo_bytes(const Fifo& f) const {
    i64 b = 0;
    for (i32 k = f.head; k >= 0; k = pkts.v[k].next) b += pkts.v[k].size;
    return b;
}

i64 Core::bytes_in_network() const {
    i64 total = 0;
    for (auto& tm : terms) total += fifo_bytes(tm.q);
    for (auto& vc : vcs) total += fifo_bytes(vc.pend) + fifo_bytes(vc.ovf);
    for (const auto* h : {&heap, &leftover})
        for (const Ev& e : *h)
            if (e.kind() == K_ARRIVE || e.kind() == K_TARRIVE) total += pkts.v[e.b].size;
    return total;
}
