//! Network partitions of a 3-member cluster of our etcd: one member is cut off from the
//! other two by iptables DROP rules inside its own network namespace (see `e2e::netns`),
//! while etcdctl in the hub namespace still reaches every member. Needs root.
//!
//! What must hold (etcd's guarantees with ReadIndex reads, pre-vote and check-quorum):
//! the cut-off member refuses writes and linearizable reads but still serves serializable
//! reads; the other two keep serving both (electing a new leader if the old one was cut
//! off); after healing, the cut-off member catches up to the same KV hash, and its return
//! does not depose the majority's leader or bump the term.

use std::time::{Duration, Instant};

use e2e::netns::{MemberStatus, NetCluster};
use e2e::wait_for;

/// The last line of etcdctl's stderr (its `Error: ...` line).
fn last_err(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).trim().lines().last().unwrap_or_default().to_string()
}

fn value_of(out: &str) -> String {
    out.trim().to_string()
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Victim {
    Leader,
    Follower,
}

fn minority_refuses_majority_serves(victim: Victim) {
    let c = &mut NetCluster::start(3, &[]);
    let all = c.all();
    let leader = c.wait_leader(&all, Duration::from_secs(30));
    c.members[leader].etcdctl_ok(&["put", "k", "before"]);
    c.wait_converged(&all, Duration::from_secs(30));
    let before = c.status(leader).expect("leader status");
    let v = match victim {
        Victim::Leader => leader,
        Victim::Follower => (leader + 1) % 3,
    };
    let majority: Vec<usize> = all.iter().copied().filter(|&i| i != v).collect();
    println!(
        "leader m{leader} (id {:x}) term {}; cutting off m{v} ({victim:?}), majority {majority:?}",
        before.leader, before.term
    );

    c.isolate(v);
    let cut_at = Instant::now();

    // The minority: writes and linearizable reads fail within the command timeout.
    let t = Instant::now();
    let out = c.members[v].etcdctl(&["put", "minority-key", "minority", "--command-timeout=3s"]);
    assert!(
        !out.status.success(),
        "cut-off m{v} accepted a put: {}\nrules:\n{}",
        String::from_utf8_lossy(&out.stdout),
        c.net.rules(v)
    );
    println!("minority put failed after {:?}: {}", t.elapsed(), last_err(&out));
    let t = Instant::now();
    let out = c.members[v].etcdctl(&["get", "k", "--command-timeout=3s"]);
    assert!(
        !out.status.success(),
        "cut-off m{v} answered a linearizable get: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    println!("minority linearizable get failed after {:?}: {}", t.elapsed(), last_err(&out));
    // ... but serves serializable reads from its own state.
    let out = c.members[v].etcdctl_ok(&[
        "get",
        "k",
        "--consistency=s",
        "--print-value-only",
        "--command-timeout=3s",
    ]);
    assert_eq!(value_of(&out), "before", "serializable get on cut-off m{v}");

    // The majority elects (or keeps) a leader and serves writes and linearizable reads.
    let majority_leader = c.wait_leader(&majority, Duration::from_secs(30));
    if victim == Victim::Follower {
        assert_eq!(majority_leader, leader, "cutting off a follower changed the leader");
    }
    println!("majority leader m{majority_leader} after {:?}", cut_at.elapsed());
    let mut last = String::new();
    for n in 0..10 {
        let writer = majority[n % 2];
        last = format!("majority-{n}");
        c.members[writer].etcdctl_ok(&["put", "k", &last, "--command-timeout=5s"]);
        for &r in &majority {
            let got = c.members[r].etcdctl_ok(&["get", "k", "--print-value-only", "--command-timeout=5s"]);
            assert_eq!(value_of(&got), last, "linearizable get on m{r} after a put on m{writer}");
        }
    }
    let during: MemberStatus = c.status(majority_leader).expect("majority leader status");
    // The cut-off member, some election timeouts in: pre-vote keeps its term where it was.
    let cut_off = c.status(v).expect("the hub still reaches the cut-off member");
    println!(
        "during the partition: majority term {}, cut-off m{v} term {} leader {:x} (before: term {})",
        during.term, cut_off.term, cut_off.leader, before.term
    );
    assert_eq!(
        cut_off.term, before.term,
        "the cut-off member's term moved while it could not reach anyone (pre-vote should keep it)"
    );
    assert!(cut_at.elapsed() > Duration::from_secs(3), "partition held for several election timeouts");
    let out = c.members[v].etcdctl(&["get", "k", "--consistency=s", "--print-value-only"]);
    assert_eq!(
        value_of(&String::from_utf8_lossy(&out.stdout)),
        "before",
        "cut-off member saw majority writes"
    );

    // Heal: the cut-off member catches up, and nobody is deposed.
    c.heal();
    let healed_at = Instant::now();
    let (rev, hash) = c.wait_converged(&all, Duration::from_secs(30));
    println!("converged after {:?}: revision {rev}, hash {hash:x}", healed_at.elapsed());
    let got = c.members[v].etcdctl_ok(&["get", "k", "--print-value-only", "--command-timeout=5s"]);
    assert_eq!(value_of(&got), last, "linearizable get on the healed member");
    let leftover = c.members[majority_leader].etcdctl_ok(&["get", "minority-key", "--print-value-only"]);
    println!(
        "the minority's failed put is {} after heal",
        if leftover.trim().is_empty() { "absent" } else { "present" }
    );

    // Watch the leadership for a few election timeouts after the heal.
    let deadline = Instant::now() + Duration::from_secs(4);
    let mut terms = Vec::new();
    while Instant::now() < deadline {
        let l = wait_for(
            "an agreed leader after heal",
            Duration::from_secs(10),
            Duration::from_millis(100),
            || c.leader_among(&all),
        );
        let s = c.status(l).expect("leader status");
        assert_eq!(
            l, majority_leader,
            "after heal m{l} leads (term {}), not the majority's leader m{majority_leader} (term {}): the returning member disrupted the cluster",
            s.term, during.term
        );
        terms.push(s.term);
        std::thread::sleep(Duration::from_millis(300));
    }
    let after = *terms.last().expect("sampled");
    println!("terms: before {}, majority during partition {}, after heal {after}", before.term, during.term);
    assert!(
        terms.iter().all(|&t| t == during.term),
        "term changed after heal: {terms:?} (majority term {})",
        during.term
    );
    match victim {
        Victim::Follower => {
            assert_eq!(during.term, before.term, "cutting off a follower must not start an election")
        }
        Victim::Leader => assert!(
            after <= before.term + 2,
            "term exploded: {} before, {after} after cutting off and healing the leader",
            before.term
        ),
    }
}

#[test]
fn minority_refuses_majority_serves_follower_cut() {
    minority_refuses_majority_serves(Victim::Follower);
}

#[test]
fn minority_refuses_majority_serves_leader_cut() {
    minority_refuses_majority_serves(Victim::Leader);
}
