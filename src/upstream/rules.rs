//! nginx's round-robin rules, transcribed from `src/http/ngx_http_upstream_round_robin.c`
//! (nginx 1.27; the functions are named where they are used), on a copy of the zone's peer
//! state in this process's memory: the zone loads the committed state, runs one rule on the
//! copy and commits the result (`zone.rs`), so these functions know nothing of shared memory.
//!
//! Times are milliseconds of `CLOCK_MONOTONIC` (nginx: seconds of `ngx_time()`); the formulas
//! are nginx's, only the unit is finer.

/// A peer's configuration (nginx's `server` parameters), fixed when the zone is made.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Conf {
    pub weight: u32,
    pub max_fails: u32,
    pub fail_timeout_ms: u64,
    pub max_conns: u32,
    pub backup: bool,
}

/// A peer's state as `ngx_http_upstream_rr_peer_t` keeps it (but `conns`, which the zone sums
/// over the processes' rows).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct State {
    pub current_weight: i64,
    pub effective_weight: i64,
    pub fails: u32,
    pub down: bool,
    /// When the peer last failed.
    pub accessed: u64,
    /// When the peer was last checked: failed, or picked more than `fail_timeout` after the
    /// previous check.
    pub checked: u64,
}

impl State {
    /// The state `ngx_http_upstream_init_round_robin` gives a peer.
    pub(crate) fn initial(conf: &Conf, down: bool) -> Self {
        Self {
            effective_weight: i64::from(conf.weight),
            down,
            ..Self::default()
        }
    }
}

/// Whether `p` is skipped for its failures now (`ngx_http_upstream_get_peer`'s test): at
/// least `max_fails` failures, the last check within `fail_timeout`.
pub(crate) fn failed(conf: &Conf, st: &State, now: u64) -> bool {
    conf.max_fails != 0
        && st.fails >= conf.max_fails
        && now.saturating_sub(st.checked) <= conf.fail_timeout_ms
}

/// Whether the peer is full (`peer->max_conns && peer->conns >= max_conns`); `conns` (a sum
/// over the processes' rows) is only counted for a peer with a limit.
pub(crate) fn full(conf: &Conf, conns: impl FnOnce() -> u32) -> bool {
    conf.max_conns != 0 && conns() >= conf.max_conns
}

/// Whether the peers make nginx's `peers->single`: one primary and no backup
/// (`ngx_http_upstream_init_round_robin` sets `single = (n == 1)`, and 0 once backups exist).
pub(crate) fn single(conf: &[Conf]) -> bool {
    conf.len() == 1 && !conf[0].backup
}

/// `ngx_http_upstream_get_peer`: smooth weighted round-robin over the peers of one tier
/// (`backup` or not) not in `tried`. Every eligible peer (not tried, not down, not skipped for
/// its failures, not full) gets its effective weight added to its current weight, and its
/// effective weight raised by one towards its weight; the one with the largest current weight
/// (the first of equals) is picked, and the sum of the effective weights is subtracted from
/// its current weight. A pick more than `fail_timeout` after the peer's last check checks it
/// again (`checked = now`).
pub(crate) fn get_peer(
    conf: &[Conf],
    st: &mut [State],
    backup: bool,
    tried: u64,
    conns: &dyn Fn(usize) -> u32,
    now: u64,
) -> Option<usize> {
    let mut best: Option<usize> = None;
    let mut total: i64 = 0;
    for i in 0..conf.len() {
        let (c, s) = (&conf[i], &mut st[i]);
        if c.backup != backup || tried & (1 << i) != 0 || s.down || failed(c, s, now) {
            continue;
        }
        if full(c, || conns(i)) {
            continue;
        }
        s.current_weight = s.current_weight.saturating_add(s.effective_weight);
        total = total.saturating_add(s.effective_weight);
        if s.effective_weight < i64::from(c.weight) {
            s.effective_weight += 1;
        }
        let w = s.current_weight;
        if best.is_none_or(|b| w > st[b].current_weight) {
            best = Some(i);
        }
    }
    let b = best?;
    st[b].current_weight = st[b].current_weight.saturating_sub(total);
    if now.saturating_sub(st[b].checked) > conf[b].fail_timeout_ms {
        st[b].checked = now;
    }
    Some(b)
}

/// `ngx_http_upstream_get_round_robin_peer`: the single peer if it is neither down nor full
/// (nginx does not skip a single peer for its failures); otherwise [`get_peer`] over the
/// primary peers, then over the backups (nginx's `failed:` label: `peers->next`).
pub(crate) fn get_round_robin_peer(
    conf: &[Conf],
    st: &mut [State],
    tried: u64,
    conns: &dyn Fn(usize) -> u32,
    now: u64,
) -> Option<usize> {
    if single(conf) {
        let ok = tried & 1 == 0 && !st[0].down && !full(&conf[0], || conns(0));
        return ok.then_some(0);
    }
    get_peer(conf, st, false, tried, conns, now)
        .or_else(|| get_peer(conf, st, true, tried, conns, now))
}

/// Whether a success clears the peer's failures: it was checked since it last failed
/// (`peer->accessed < peer->checked`, "mark peer live if check passed").
pub(crate) fn clears_fails(st: &State) -> bool {
    st.accessed < st.checked
}

/// `ngx_http_upstream_free_round_robin_peer` for peer `p` (its connection count is the
/// zone's business): nothing for a single peer. A failure counts (`fails++`), stamps
/// `accessed` and `checked`, and lowers the effective weight by `weight / max_fails` (not
/// below 0); a success after a check since the last failure (`accessed < checked`) clears
/// the failures. Returns whether the state changed.
pub(crate) fn free_peer(
    conf: &[Conf],
    st: &mut [State],
    p: usize,
    failure: bool,
    now: u64,
) -> bool {
    if single(conf) {
        return false;
    }
    let (c, s) = (&conf[p], &mut st[p]);
    let before = *s;
    if failure {
        s.fails = s.fails.saturating_add(1);
        s.accessed = now;
        s.checked = now;
        if let Some(step) = c.weight.checked_div(c.max_fails) {
            s.effective_weight = s.effective_weight.saturating_sub(i64::from(step));
        }
        if s.effective_weight < 0 {
            s.effective_weight = 0;
        }
    } else if clears_fails(s) {
        s.fails = 0;
    }
    *s != before
}
