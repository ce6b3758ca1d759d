//! fairseq 0.12.2 `token_generation_constraints.py`: the progress of one beam hypothesis
//! through its sentence's lexical constraints (`OrderedConstraintState`,
//! `UnorderedConstraintState` over a `ConstraintNode` trie).
//!
//! fairseq returns a state's next tokens as a Python `set`, and the constrained search adds
//! them to its candidates in the set's iteration order; `PySet` reproduces that order.

use std::sync::Arc;

/// `--constraints ordered|unordered`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConstraintOrder {
    /// `OrderedConstraintState`: the constraints appear in the order given.
    Ordered,
    /// `UnorderedConstraintState`: in any order.
    Unordered,
}

impl ConstraintOrder {
    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "ordered" => Some(ConstraintOrder::Ordered),
            "unordered" => Some(ConstraintOrder::Unordered),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            ConstraintOrder::Ordered => "ordered",
            ConstraintOrder::Unordered => "unordered",
        }
    }
}

/// A CPython 3.11 `set` of non-negative ints (`hash(i) == i`), kept only for its iteration
/// order: `set_add_entry`, `set_table_resize` and `set_merge` with their probe sequence.
#[derive(Debug, Clone)]
pub(crate) struct PySet {
    table: Vec<Option<i64>>,
    fill: usize,
}

const LINEAR_PROBES: usize = 9;
const PERTURB_SHIFT: u32 = 5;

impl PySet {
    pub(crate) fn new() -> Self {
        PySet { table: vec![None; 8], fill: 0 }
    }

    fn mask(&self) -> usize {
        self.table.len() - 1
    }

    /// The slot `set_insert_clean` / `set_add_entry` end at for `key` (`None` when present).
    fn slot(table: &[Option<i64>], key: i64) -> Option<usize> {
        let mask = table.len() - 1;
        let hash = key as u64 as usize;
        let mut perturb = hash;
        let mut i = hash & mask;
        loop {
            let probes = if i + LINEAR_PROBES <= mask { LINEAR_PROBES } else { 0 };
            for (&entry, j) in table[i..=i + probes].iter().zip(i..) {
                match entry {
                    None => return Some(j),
                    Some(k) if k == key => return None,
                    Some(_) => {}
                }
            }
            perturb >>= PERTURB_SHIFT;
            i = (i.wrapping_mul(5).wrapping_add(1).wrapping_add(perturb)) & mask;
        }
    }

    fn resize(&mut self, minused: usize) {
        let mut size = 8;
        while size <= minused {
            size <<= 1;
        }
        let old = std::mem::replace(&mut self.table, vec![None; size]);
        for key in old.into_iter().flatten() {
            if let Some(j) = Self::slot(&self.table, key) {
                self.table[j] = Some(key);
            }
        }
    }

    pub(crate) fn add(&mut self, key: i64) {
        if let Some(j) = Self::slot(&self.table, key) {
            self.table[j] = Some(key);
            self.fill += 1;
            let mask = self.mask();
            if self.fill * 5 >= mask * 3 {
                self.resize(if self.fill > 50_000 { self.fill * 2 } else { self.fill * 4 });
            }
        }
    }

    /// `set(keys)`.
    pub(crate) fn from_keys(keys: impl IntoIterator<Item = i64>) -> Self {
        let mut s = PySet::new();
        for k in keys {
            s.add(k);
        }
        s
    }

    /// `self.union(other)`: a copy of `self` (`set_merge` into an empty set), then `other`'s
    /// elements merged in.
    pub(crate) fn union(&self, other: &PySet) -> PySet {
        let mut out = PySet::new();
        out.merge(self);
        out.merge(other);
        out
    }

    fn merge(&mut self, other: &PySet) {
        if other.fill == 0 {
            return;
        }
        if (self.fill + other.fill) * 5 >= self.mask() * 3 {
            self.resize((self.fill + other.fill) * 2);
        }
        if self.fill == 0 && self.mask() == other.mask() {
            self.table.clone_from(&other.table);
            self.fill = other.fill;
            return;
        }
        if self.fill == 0 {
            for key in other.table.iter().flatten() {
                if let Some(j) = Self::slot(&self.table, *key) {
                    self.table[j] = Some(*key);
                }
            }
            self.fill = other.fill;
            return;
        }
        for key in other.table.iter().flatten() {
            self.add(*key);
        }
    }

    /// `list(set)`.
    pub(crate) fn to_vec(&self) -> Vec<i64> {
        self.table.iter().flatten().copied().collect()
    }
}

#[derive(Debug)]
struct Node {
    parent: Option<usize>,
    terminal: i64,
    /// In insertion order (a Python dict).
    children: Vec<(i64, usize)>,
    num_constraints: i64,
}

/// `ConstraintNode`: the trie of a sentence's constraints; node 0 is the root.
#[derive(Debug)]
struct Trie {
    nodes: Vec<Node>,
}

const ROOT: usize = 0;

impl Trie {
    fn create(constraints: &[Vec<i64>]) -> Trie {
        let mut trie = Trie { nodes: vec![Node { parent: None, terminal: 0, children: Vec::new(), num_constraints: 0 }] };
        for sequence in constraints {
            trie.add_sequence(ROOT, sequence);
        }
        trie
    }

    fn child(&self, node: usize, token: i64) -> Option<usize> {
        self.nodes[node].children.iter().find(|(t, _)| *t == token).map(|&(_, c)| c)
    }

    fn add_sequence(&mut self, mut node: usize, sequence: &[i64]) {
        for (i, &token) in sequence.iter().enumerate() {
            let next = match self.child(node, token) {
                Some(c) => c,
                None => {
                    self.nodes.push(Node { parent: Some(node), terminal: 0, children: Vec::new(), num_constraints: 0 });
                    let c = self.nodes.len() - 1;
                    self.nodes[node].children.push((token, c));
                    c
                }
            };
            node = next;
            if i + 1 == sequence.len() {
                self.nodes[node].terminal += 1;
                let mut n = Some(node);
                while let Some(k) = n {
                    self.nodes[k].num_constraints += 1;
                    n = self.nodes[k].parent;
                }
            }
        }
    }

    fn next_tokens(&self, node: usize) -> PySet {
        PySet::from_keys(self.nodes[node].children.iter().map(|&(t, _)| t))
    }
}

/// The constraints of one sentence, shared by the states of its hypotheses.
#[derive(Debug)]
enum Constraints {
    Ordered {
        /// `ConstraintSequence.sequences`: the constraints concatenated.
        sequence: Vec<i64>,
        /// True where a constraint ends.
        endpoints: Vec<bool>,
    },
    Unordered(Trie),
}

/// One hypothesis' progress through its sentence's constraints.
#[derive(Debug, Clone)]
pub struct ConstraintState {
    constraints: Arc<Constraints>,
    /// `len(state.tokens)` (see `create`).
    num_tokens: usize,
    /// Ordered: `state`, the index of the last constraint token met (-1: none).
    state: i64,
    /// Unordered: the trie node, and the `completed` / `generated` counters per node.
    node: usize,
    completed: Vec<i64>,
    generated: Vec<i64>,
}

impl ConstraintState {
    /// `OrderedConstraintState.create` / `UnorderedConstraintState.create` for one sentence's
    /// constraints (each a non-empty token sequence).
    pub fn create(order: ConstraintOrder, constraints: &[Vec<i64>]) -> ConstraintState {
        let (shared, nodes) = match order {
            ConstraintOrder::Ordered => {
                let mut endpoints = Vec::new();
                for c in constraints {
                    endpoints.extend(std::iter::repeat_n(false, c.len().saturating_sub(1)));
                    endpoints.push(true);
                }
                (Constraints::Ordered { sequence: constraints.concat(), endpoints }, 0)
            }
            ConstraintOrder::Unordered => {
                let trie = Trie::create(constraints);
                let n = trie.nodes.len();
                (Constraints::Unordered(trie), n)
            }
        };
        // `len(state.tokens)`: the ordered state's set holds 0-d tensors, which hash by
        // identity, so it counts every token; the trie's holds ints, so it counts distinct ones
        let num_tokens = match order {
            ConstraintOrder::Ordered => constraints.iter().map(Vec::len).sum(),
            ConstraintOrder::Unordered => {
                let mut distinct: Vec<i64> = constraints.concat();
                distinct.sort_unstable();
                distinct.dedup();
                distinct.len()
            }
        };
        ConstraintState {
            constraints: Arc::new(shared),
            num_tokens,
            state: -1,
            node: ROOT,
            completed: vec![0; nodes],
            generated: vec![0; nodes],
        }
    }

    /// `len(state.tokens)`: the sort key's weight of a bank.
    pub fn num_tokens(&self) -> usize {
        self.num_tokens
    }

    /// `state.bank`: constraint tokens generated so far.
    pub fn bank(&self) -> i64 {
        match &*self.constraints {
            Constraints::Ordered { .. } => self.state + 1,
            Constraints::Unordered(_) => self.generated.iter().sum(),
        }
    }

    /// `state.finished`: every constraint has been met.
    pub fn finished(&self) -> bool {
        match &*self.constraints {
            Constraints::Ordered { sequence, .. } => self.state + 1 == sequence.len() as i64,
            Constraints::Unordered(trie) => {
                let node = &trie.nodes[self.node];
                let in_final = i64::from(node.terminal != 0 && self.completed[self.node] < node.terminal);
                trie.nodes[ROOT].num_constraints - (self.completed.iter().sum::<i64>() + in_final) == 0
            }
        }
    }

    /// `list(state.next_tokens())`, in the set's order. (The ordered state's set holds 0-d
    /// tensors, ordered by their addresses; it is taken in insertion order here. The order
    /// only matters between candidates of exactly equal score.)
    pub fn next_tokens(&self) -> Vec<i64> {
        match &*self.constraints {
            Constraints::Ordered { sequence, .. } => {
                let mut tokens = Vec::with_capacity(2);
                if self.state > 0 {
                    tokens.push(sequence[0]);
                }
                if !self.finished() {
                    tokens.push(sequence[(self.state + 1) as usize]);
                }
                tokens
            }
            Constraints::Unordered(trie) => {
                let root = trie.next_tokens(ROOT);
                if self.node != ROOT {
                    root.union(&trie.next_tokens(self.node)).to_vec()
                } else {
                    root.to_vec()
                }
            }
        }
    }

    /// `state.advance(token)`: the state after the hypothesis generates `token`.
    pub fn advance(&self, token: i64) -> ConstraintState {
        match &*self.constraints {
            Constraints::Ordered { sequence, endpoints } => {
                let next = |state: i64| ConstraintState { state, ..self.clone() };
                if self.finished() {
                    self.clone()
                } else if sequence[(self.state + 1) as usize] == token {
                    next(self.state + 1)
                } else if endpoints[if self.state < 0 { endpoints.len() - 1 } else { self.state as usize }] {
                    // (Python's endpoints[-1] at the root state)
                    self.clone()
                } else if token == sequence[0] {
                    next(0)
                } else {
                    next(-1)
                }
            }
            Constraints::Unordered(trie) => self.advance_unordered(trie, token),
        }
    }

    /// `UnorderedConstraintState(node, copy_from=self)`.
    fn moved_to(&self, node: usize) -> ConstraintState {
        let mut s = ConstraintState { node, ..self.clone() };
        if node != ROOT {
            s.generated[node] += 1;
        }
        s
    }

    fn advance_unordered(&self, trie: &Trie, token: i64) -> ConstraintState {
        let open = |child: usize| self.generated[child] < trie.nodes[child].num_constraints;
        if let Some(child) = trie.child(self.node, token).filter(|&c| open(c)) {
            return self.moved_to(child);
        }
        let mut next = match trie.child(ROOT, token) {
            Some(child) if open(child) => self.moved_to(child),
            _ => self.moved_to(ROOT),
        };
        // rewind: off the trie, a completed prefix of the current path counts as met
        let mut node = self.node;
        while node != ROOT {
            let n = &trie.nodes[node];
            if n.terminal != 0 && self.completed[node] < n.terminal {
                next.completed[node] += 1;
                break;
            }
            next.generated[node] -= 1;
            node = n.parent.unwrap_or(ROOT);
        }
        next
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_order_is_cpythons() {
        // from CPython 3.11: list(set(xs)), list(set(a).union(set(b)))
        assert_eq!(PySet::from_keys([5, 3, 9]).to_vec(), vec![9, 3, 5]);
        assert_eq!(PySet::from_keys([1030, 6, 14]).to_vec(), vec![14, 1030, 6]);
        assert_eq!(PySet::from_keys([20, 4, 12, 3, 100, 7]).to_vec(), vec![3, 100, 4, 7, 12, 20]);
        assert_eq!(PySet::from_keys([8, 16]).union(&PySet::from_keys([24, 1])).to_vec(), vec![8, 16, 24, 1]);
    }

    #[test]
    fn ordered_state_follows_fairseqs_transitions() {
        // constraints [[10, 11], [12]]
        let s = ConstraintState::create(ConstraintOrder::Ordered, &[vec![10, 11], vec![12]]);
        assert_eq!((s.bank(), s.finished(), s.next_tokens()), (0, false, vec![10]));
        let s1 = s.advance(10);
        assert_eq!((s1.bank(), s1.next_tokens()), (1, vec![11]));
        // mid-constraint, another token: back to the root (10 would restart at state 0)
        assert_eq!(s1.advance(7).bank(), 0);
        let s2 = s1.advance(11);
        // state 1 > 0: the first token is offered again beside the next one
        assert_eq!(s2.next_tokens(), vec![10, 12]);
        // at an endpoint, other tokens keep the state
        assert_eq!(s2.advance(7).bank(), 2);
        let s3 = s2.advance(12);
        assert!(s3.finished());
        assert_eq!(s3.advance(5).bank(), 3);
        assert_eq!(s.num_tokens(), 3);
        let repeated = [vec![5, 5], vec![5]];
        assert_eq!(ConstraintState::create(ConstraintOrder::Ordered, &repeated).num_tokens(), 3);
        assert_eq!(ConstraintState::create(ConstraintOrder::Unordered, &repeated).num_tokens(), 1);
    }

    #[test]
    fn unordered_state_tracks_the_trie() {
        // constraints [[4, 5], [4, 6], [7]]: banks count tokens met, in any order
        let s = ConstraintState::create(ConstraintOrder::Unordered, &[vec![4, 5], vec![4, 6], vec![7]]);
        assert_eq!(s.next_tokens(), vec![4, 7]);
        let a = s.advance(7);
        assert_eq!((a.bank(), a.finished()), (1, false));
        let b = a.advance(4);
        assert_eq!(b.bank(), 2);
        assert_eq!(b.next_tokens(), vec![4, 5, 6, 7]);
        let c = b.advance(5);
        assert_eq!(c.bank(), 3);
        let d = c.advance(4).advance(6);
        assert!(d.finished());
        assert_eq!(d.bank(), 5);
        // falling off mid-constraint gives the partial tokens back
        let e = s.advance(4).advance(9);
        assert_eq!((e.bank(), e.finished()), (0, false));
        assert!(ConstraintState::create(ConstraintOrder::Unordered, &[]).finished());
        assert!(ConstraintState::create(ConstraintOrder::Ordered, &[]).finished());
    }
}
