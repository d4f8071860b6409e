// The message layer: messages, requests and matching, ranks' op lists, background senders and per-job byte
// counters (mpi.py, line by line).
#include "core.hpp"

// a message (its references: local completion and delivery, each dropped when handled) to its source NIC after
// t plus CODES' local latency
void Core::post(double t, i32 kind, i64 src, i64 dst, i64 tag, i64 size, i64 wire, i32 st, i32 dt, i32 sreq, i32 rreq,
                i32 jb) {
    i32 mi = msgs.alloc();
    msgs[mi] = Msg{kind, src, dst, tag, size, wire, st, dt, 0, sreq, rreq, jb, 2};
    req_ref(sreq);
    req_ref(rreq);
    messages += 1;
    push((t + 0.505) + 0.5 * rng.random(), K_INJECT, mi);
}

void Core::send(double t, Rank& rs, i64 dst, i64 nbytes, i64 tag, i32 rq) {
    Rank* d = rank_of(dst);
    if (!d) throw py::key_error(std::to_string(dst));
    i32 jb = counted(rs.job);
    if (nbytes < EAGER_THRESHOLD)
        post((((t + SELF_OVERHEAD) + COPY_PER_BYTE * nbytes) + SOFT_DELAY) + NIC_DELAY, EAGER, rs.gid, dst, tag,
             nbytes, nbytes, rs.term, d->term, rq, -1, jb);
    else
        post(t + CONTROL_OFFSET, RTS, rs.gid, dst, tag, nbytes, CONTROL_SIZE, rs.term, d->term, rq, -1, jb);
}

void Core::send_background(double t, i64 gid, i64 dst, i64 nbytes) {
    Rank* rs = rank_of(gid);
    Rank* d = rank_of(dst);
    if (!rs || !d) throw py::key_error(std::to_string(rs ? dst : gid));
    check_time(t);
    check_range(nbytes, 0, EXACT_INT - 1, "background message size");
    i32 jb = counted(rs->job);
    post(t, BG, gid, dst, 0, nbytes, nbytes, rs->term, d->term, -1, -1, jb);
}

// engine.py's _bg_gen for a uniform-random background rank (workloads/simple.py UniformRandomJob.destination),
// event for event: the destination drawn from bg_rng as random.Random.randrange(n) (a draw equal to the sender
// becomes the next rank), the message posted, the next send one interval later
void Core::start_background(double t, i64 gid, i64 n, i64 nbytes, double interval) {
    Rank* rs = rank_of(gid);
    if (!rs) throw py::key_error(std::to_string(gid));
    check_range(n, 1, (i64)1 << 32, "a background job's ranks");
    check_range(nbytes, 0, EXACT_INT - 1, "background message size");
    check_time(t);
    check_duration(interval, "background interval");
    rs->bg_n = n;
    rs->bg_bytes = nbytes;
    rs->bg_interval = interval;
    if (!(t >= 0.0)) throw py::value_error("event time must be a number >= 0 ns, got " + std::to_string(t));
    push(t, K_BG, (i32)gid);
}

void Core::bg_send(double t, i32 gid) {
    Rank* rs = rank_of(gid);
    if (!rs) throw py::key_error(std::to_string(gid));
    i64 n = rs->bg_n, local = rs->local;
    i64 d = bg_rng.randbelow(n);
    if (d == local) d = (local + 1) % n;
    send_background(t, gid, gid - local + d, rs->bg_bytes);
    push(t + rs->bg_interval, K_BG, gid);
}

void Core::on_local(double t, i32 mi) {
    i32 k = msgs[mi].kind;
    if (k == EAGER || k == DATA) complete(t, msgs[mi].sreq);
    msg_unref(mi);
}

void Core::on_deliver(double t, i32 mi) {
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

void Core::ack(double t, i32 mi, i32 rreq) {
    Msg m = msgs[mi];
    post(t + CONTROL_OFFSET, ACK, m.dst, m.src, m.tag, m.size, CONTROL_SIZE, m.dst_term, m.src_term, m.sreq, rreq,
         m.jb);
}

void Core::irecv(double t, Rank& rs, i64 src, i64 tag, i32 rq) {
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

void Core::complete(double t, i32 q) {
    Req& rq = reqs[q];
    rq.done = true;
    if (rq.waited) {
        rq.waited = false;
        Rank* rs = ranks[rq.rank].get();
        rs->nwait -= 1;
        if (rs->nwait == 0) advance(t, rs->gid);
    }
}

void Core::set_req(Rank& rs, i64 id, i32 q) {
    auto it = rs.reqs.find(id);
    if (it != rs.reqs.end()) {
        req_unref(it->second);
        it->second = q;
    } else rs.reqs.emplace(id, q);
    req_ref(q);
}

void Core::advance(double t, i64 gid) {
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
                push(check_time(t + op.ns), K_RESUME, (i32)gid);  // EventLoop.at's check, as the Python core
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
    keep_record(rs, rs.it, rs.start_t, t, true);  // after the flush: a burst is the store's last rows
    on_iteration_end(t, gid);
}

void Core::add_rank(i64 gid, i64 job, i64 local, i64 term) {
    check_range(gid, 0, MAX_ID, "a rank's global id");
    check_range(job, 0, MAX_ID, "a rank's job id");
    check_range(local, 0, MAX_ID, "a rank's local id");
    check_index(term, (i64)terms.size(), "a rank's terminal");
    if (gid >= (i64)ranks.size()) ranks.resize(gid + 1);
    n_jobs = std::max(n_jobs, job + 1);
    auto r = std::make_unique<Rank>();
    r->gid = gid;
    r->job = job;
    r->local = local;
    r->term = (i32)term;
    ranks[gid] = std::move(r);
}

void Core::clear_iteration(Rank& rs) {
    for (auto& kv : rs.reqs) req_unref(kv.second);
    rs.reqs.clear();
}

Rank& Core::added_rank(i64 gid) {
    if (gid < 0 || gid >= (i64)ranks.size() || !ranks[gid])
        throw py::index_error("no rank with global id " + std::to_string(gid) + " was added");
    return *ranks[gid];
}

void Core::stop_rank(i64 gid) { added_rank(gid).done = true; }

void Core::drop_rank(i64 gid) {
    Rank& rs = added_rank(gid);
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

void Core::start_iteration(double t, i64 gid, i64 it, py::sequence ops) {
    Rank& rs = added_rank(gid);
    check_time(t);
    check_range(it, 0, MAX_ID, "iteration");
    rs.it = it;
    rs.start_t = t;
    rs.ops.clear();
    rs.waits.clear();
    rs.pyops = ops;
    size_t n = py::len(ops);
    rs.ops.reserve(n);
    for (size_t i = 0; i < n; i++) {
        py::sequence op = py::reinterpret_borrow<py::sequence>(ops[i]);
        Op o{-1, 0, 0, 0, 0, 0.0, 0, 0};
        i64 k = op_int(op[0], "op kind");
        size_t m = py::len(op);
        if (k == COMPUTE && m == 2) {
            o.kind = COMPUTE;
            o.ns = op[1].cast<double>();
        } else if (k == ISEND && m == 5) {
            o.kind = ISEND;
            o.peer = op_int(op[1], "op peer");
            o.nbytes = op_int(op[2], "op nbytes");
            o.tag = op_int(op[3], "op tag");
            o.req = op_int(op[4], "op req");
        } else if (k == IRECV && m == 4) {
            o.kind = IRECV;
            o.peer = op_int(op[1], "op peer");
            o.tag = op_int(op[2], "op tag");
            o.req = op_int(op[3], "op req");
        } else if (k == SEND && m == 4) {
            o.kind = SEND;
            o.peer = op_int(op[1], "op peer");
            o.nbytes = op_int(op[2], "op nbytes");
            o.tag = op_int(op[3], "op tag");
        } else if (k == RECV && m == 3) {
            o.kind = RECV;
            o.peer = op_int(op[1], "op peer");
            o.tag = op_int(op[2], "op tag");
        } else if (k == WAITALL && m == 2) {
            o.kind = WAITALL;
            o.woff = (i32)rs.waits.size();
            for (auto w : py::reinterpret_borrow<py::iterable>(op[1])) rs.waits.push_back(op_int(w, "WAITALL request"));
            o.wn = (i32)rs.waits.size() - o.woff;
        }
        rs.ops.push_back(o);
    }
    rs.pc = 0;
    clear_iteration(rs);
    advance(t, gid);
}

void Core::count_bytes(i64 j) {
    check_index(j, n_jobs, "job (of no added rank)");
    if (j >= (i64)jbytes.size()) {
        jbytes.resize(j + 1);
        jwork.resize(j + 1);
        jb_on.resize(j + 1, false);
    }
    jbytes[j].assign(ports.size(), 0);
    jwork[j].assign(ports.size(), 0.0);
    jb_on[j] = true;
}

void Core::forget_bytes(i64 j) {
    if (j >= 0 && j < (i64)jbytes.size()) {  // a job not counted: nothing to forget (as the Python core)
        jb_on[j] = false;
        std::vector<i64>().swap(jbytes[j]);
        std::vector<double>().swap(jwork[j]);
    }
}

py::object Core::job_bytes(i64 j) {
    if (j < 0 || j >= (i64)jbytes.size() || !jb_on[j]) return py::none();
    return py::cast(jbytes[j]);
}

py::object Core::job_work(i64 j) {
    if (j < 0 || j >= (i64)jwork.size() || !jb_on[j]) return py::none();
    return py::cast(jwork[j]);
}
