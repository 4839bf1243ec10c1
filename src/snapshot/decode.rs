//! A data-only unpickler for the snapshot, run after [`super::guard::check`] has bounded the file.
//!
//! `serde-pickle` 1.2 counts the uses of each memo entry and hands its value out that many times;
//! a memoised value that is itself inside another memoised value which is used twice is asked for
//! more times than it was counted, and it answers "recursive structure found". Real snapshots do
//! exactly this (a frame list shared by a segment and its first block, frame dicts shared between
//! blocks): every snapshot captured on the H200 (tests/fixtures/snapshot/h200) failed so. Here
//! containers live in an arena, the memo holds arena indices (Python's own sharing), and the tree is materialised once
//! into `serde_pickle::Value` at the end, so `serde` still does the typed decoding.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde_pickle::{HashableValue, Value};

enum Node {
    Scalar(Value),
    List(Vec<usize>),
    Tuple(Vec<usize>),
    Dict(Vec<(usize, usize)>),
    Set(Vec<usize>),
    FrozenSet(Vec<usize>),
}

struct Machine<'a> {
    data: &'a [u8],
    pos: usize,
    arena: Vec<Node>,
    stack: Vec<usize>,
    marks: Vec<usize>,
    memo: HashMap<u64, usize>,
}

/// Decodes a pickle the guard accepted into a `Value` tree; `Err` is one line.
#[cfg(test)]
pub fn decode(data: &[u8]) -> Result<Value, String> {
    let mut m = Machine::new(data);
    let root = m.run()?;
    m.materialise(root, 0)
}

/// Decodes a snapshot pickle the guard accepted. The segments and trace entries are turned into
/// their types one at a time, so the whole file is never a `Value` tree at once (a tree costs
/// about twenty times the file). Any other shape goes through the whole tree and says why it
/// is not a snapshot.
pub fn decode_snapshot(data: &[u8]) -> Result<super::Snapshot, String> {
    let mut m = Machine::new(data);
    let root = m.run()?;
    m.stack = Vec::new();
    m.memo = HashMap::new();
    match m.snapshot(root) {
        Some(snap) => snap,
        None => typed(m.materialise(root, 0)?),
    }
}

/// A `Value` as its type; `Err` is the one-line reason.
fn typed<T: serde::de::DeserializeOwned>(v: Value) -> Result<T, String> {
    serde_pickle::from_value(v).map_err(|e| {
        let msg = e.to_string();
        let first = msg.lines().next().unwrap_or("unreadable");
        format!("it is not a memory snapshot ({first})")
    })
}

impl<'a> Machine<'a> {
    fn new(data: &'a [u8]) -> Self {
        Machine {
            data,
            pos: 0,
            arena: Vec::new(),
            stack: Vec::new(),
            marks: Vec::new(),
            memo: HashMap::new(),
        }
    }
}

impl Machine<'_> {
    fn list(&self, id: usize) -> Option<&[usize]> {
        match self.arena.get(id) {
            Some(Node::List(ids) | Node::Tuple(ids)) => Some(ids),
            _ => None,
        }
    }

    /// The snapshot item by item; `None` when the root is not a dict of lists where a snapshot
    /// has them (the caller then reads the whole tree for its error).
    fn snapshot(&self, root: usize) -> Option<Result<super::Snapshot, String>> {
        let Some(Node::Dict(pairs)) = self.arena.get(root) else {
            return None;
        };
        let mut rest = BTreeMap::new();
        let (mut segments, mut traces) = (None, None);
        for (k, v) in pairs {
            let key = match self.arena.get(*k) {
                Some(Node::Scalar(Value::String(s))) => s.as_str(),
                _ => return None,
            };
            match key {
                "segments" => segments = Some(self.list(*v)?),
                "device_traces" => {
                    let per_device: Option<Vec<&[usize]>> =
                        self.list(*v)?.iter().map(|d| self.list(*d)).collect();
                    traces = Some(per_device?);
                }
                _ => {
                    let value = match self.materialise(*v, 1) {
                        Ok(v) => v,
                        Err(e) => return Some(Err(e)),
                    };
                    rest.insert(HashableValue::String(key.to_string()), value);
                }
            }
        }
        Some((|| {
            let mut snap: super::Snapshot = typed(Value::Dict(rest))?;
            if let Some(ids) = segments {
                snap.segments = ids
                    .iter()
                    .map(|id| typed(self.materialise(*id, 2)?))
                    .collect::<Result<_, String>>()?;
            }
            if let Some(devices) = traces {
                snap.device_traces = devices
                    .iter()
                    .map(|ids| {
                        ids.iter()
                            .map(|id| typed(self.materialise(*id, 3)?))
                            .collect::<Result<Vec<_>, String>>()
                    })
                    .collect::<Result<_, String>>()?;
            }
            Ok(snap)
        })())
    }
}

fn damaged(what: &str, pos: usize) -> String {
    format!("it is damaged: {what} at byte {pos}")
}

impl Machine<'_> {
    fn take(&mut self, n: u64) -> Result<&[u8], String> {
        let left = (self.data.len() - self.pos) as u64;
        if n > left {
            return Err(damaged("a length runs past the end", self.pos));
        }
        let start = self.pos;
        self.pos += n as usize;
        Ok(&self.data[start..self.pos])
    }

    fn uint(&mut self, width: u64) -> Result<u64, String> {
        Ok(self
            .take(width)?
            .iter()
            .rev()
            .fold(0u64, |acc, x| (acc << 8) | u64::from(*x)))
    }

    fn line(&mut self) -> Result<String, String> {
        let rest = &self.data[self.pos..];
        let end = rest
            .iter()
            .position(|b| *b == b'\n')
            .ok_or_else(|| damaged("a text field has no end of line", self.pos))?;
        let text = String::from_utf8_lossy(&rest[..end]).into_owned();
        self.pos += end + 1;
        Ok(text)
    }

    fn push(&mut self, n: Node) {
        self.arena.push(n);
        self.stack.push(self.arena.len() - 1);
    }

    fn scalar(&mut self, v: Value) {
        self.push(Node::Scalar(v));
    }

    fn pop(&mut self) -> Result<usize, String> {
        let floor = self.marks.last().copied().unwrap_or(0);
        if self.stack.len() <= floor {
            return Err(damaged("the stack is empty", self.pos));
        }
        self.stack
            .pop()
            .ok_or_else(|| damaged("the stack is empty", self.pos))
    }

    fn pop_mark(&mut self) -> Result<Vec<usize>, String> {
        let m = self
            .marks
            .pop()
            .ok_or_else(|| damaged("no MARK", self.pos))?;
        Ok(self.stack.split_off(m.min(self.stack.len())))
    }

    fn top(&self) -> Result<usize, String> {
        self.stack
            .last()
            .copied()
            .ok_or_else(|| damaged("the stack is empty", self.pos))
    }

    fn text(&mut self, width: u64) -> Result<(), String> {
        let n = self.uint(width)?;
        let s = String::from_utf8_lossy(self.take(n)?).into_owned();
        self.scalar(Value::String(s));
        Ok(())
    }

    fn bytes(&mut self, width: u64) -> Result<(), String> {
        let n = self.uint(width)?;
        let b = self.take(n)?.to_vec();
        self.scalar(Value::Bytes(b));
        Ok(())
    }

    fn long(&mut self, width: u64) -> Result<(), String> {
        let n = self.uint(width)?;
        let b = self.take(n)?;
        let v = match b.len() {
            0 => Value::I64(0),
            1..=8 => {
                // Little-endian two's complement, sign-extended from its top byte.
                let neg = b[b.len() - 1] & 0x80 != 0;
                let mut x: u64 = if neg { u64::MAX } else { 0 };
                for (i, byte) in b.iter().enumerate() {
                    x &= !(0xffu64 << (8 * i));
                    x |= u64::from(*byte) << (8 * i);
                }
                Value::I64(x as i64)
            }
            // Past 64 bits (not in a snapshot): kept as an approximate float.
            _ => Value::F64(
                b.iter()
                    .rev()
                    .fold(0f64, |acc, x| acc * 256.0 + f64::from(*x)),
            ),
        };
        self.scalar(v);
        Ok(())
    }

    fn add(&mut self, target: usize, items: Vec<usize>) -> Result<(), String> {
        let pos = self.pos;
        match self.arena.get_mut(target) {
            Some(Node::List(v) | Node::Set(v)) => v.extend(items),
            Some(Node::Dict(d)) => {
                if items.len() % 2 != 0 {
                    return Err(damaged("a dict gets an odd number of items", pos));
                }
                d.extend(items.chunks(2).map(|p| (p[0], p[1])));
            }
            _ => return Err(damaged("items added to a non-container", pos)),
        }
        Ok(())
    }

    fn run(&mut self) -> Result<usize, String> {
        loop {
            let op = *self
                .data
                .get(self.pos)
                .ok_or_else(|| damaged("it ends before its STOP opcode", self.pos))?;
            self.pos += 1;
            if op == b'.' {
                return self.pop();
            }
            self.step(op)?;
        }
    }

    fn step(&mut self, op: u8) -> Result<(), String> {
        match op {
            0x80 => drop(self.take(1)?),
            0x95 => drop(self.take(8)?),
            b'(' => self.marks.push(self.stack.len()),
            b'0' => drop(self.pop()?),
            b'1' => drop(self.pop_mark()?),
            b'2' => {
                let t = self.top()?;
                self.stack.push(t);
            }
            b'p' | b'q' | b'r' | 0x94 => {
                let id = match op {
                    b'p' => parse(&self.line()?)?,
                    b'q' => self.uint(1)?,
                    b'r' => self.uint(4)?,
                    _ => self.memo.len() as u64,
                };
                let t = self.top()?;
                self.memo.insert(id, t);
            }
            b'g' | b'h' | b'j' => {
                let id = match op {
                    b'g' => parse(&self.line()?)?,
                    b'h' => self.uint(1)?,
                    _ => self.uint(4)?,
                };
                let t = *self
                    .memo
                    .get(&id)
                    .ok_or_else(|| damaged("a memo read before it is written", self.pos))?;
                self.stack.push(t);
            }
            b'N' => self.scalar(Value::None),
            0x88 => self.scalar(Value::Bool(true)),
            0x89 => self.scalar(Value::Bool(false)),
            b'K' => {
                let v = self.uint(1)? as i64;
                self.scalar(Value::I64(v));
            }
            b'M' => {
                let v = self.uint(2)? as i64;
                self.scalar(Value::I64(v));
            }
            b'J' => {
                let v = self.uint(4)? as u32 as i32;
                self.scalar(Value::I64(i64::from(v)));
            }
            b'G' => {
                let b = self.take(8)?;
                let mut a = [0u8; 8];
                a.copy_from_slice(b);
                self.scalar(Value::F64(f64::from_be_bytes(a)));
            }
            b'I' | b'L' => {
                let t = self.line()?;
                let t = t.trim().trim_end_matches('L');
                let v = match t {
                    "00" => Value::Bool(false),
                    "01" => Value::Bool(true),
                    _ => t
                        .parse::<i64>()
                        .map(Value::I64)
                        .or_else(|_| t.parse::<f64>().map(Value::F64))
                        .map_err(|_| damaged("an integer is not a number", self.pos))?,
                };
                self.scalar(v);
            }
            b'F' => {
                let t = self.line()?;
                let v = t
                    .trim()
                    .parse::<f64>()
                    .map_err(|_| damaged("a float is not a number", self.pos))?;
                self.scalar(Value::F64(v));
            }
            b'S' | b'V' => {
                let t = self.line()?;
                let s = if op == b'S' {
                    t.trim().trim_matches(|c| c == '\'' || c == '"').to_string()
                } else {
                    t
                };
                self.scalar(Value::String(s));
            }
            0x8a => self.long(1)?,
            0x8b => self.long(4)?,
            0x8c | b'U' => self.text(1)?,
            b'X' | b'T' => self.text(4)?,
            0x8d => self.text(8)?,
            b'C' => self.bytes(1)?,
            b'B' => self.bytes(4)?,
            0x8e | 0x96 => self.bytes(8)?,
            b']' => self.push(Node::List(Vec::new())),
            b')' => self.push(Node::Tuple(Vec::new())),
            b'}' => self.push(Node::Dict(Vec::new())),
            0x8f => self.push(Node::Set(Vec::new())),
            b'l' => {
                let items = self.pop_mark()?;
                self.push(Node::List(items));
            }
            b't' => {
                let items = self.pop_mark()?;
                self.push(Node::Tuple(items));
            }
            0x91 => {
                let items = self.pop_mark()?;
                self.push(Node::FrozenSet(items));
            }
            b'd' => {
                let items = self.pop_mark()?;
                if items.len() % 2 != 0 {
                    return Err(damaged("a dict gets an odd number of items", self.pos));
                }
                let pairs = items.chunks(2).map(|p| (p[0], p[1])).collect();
                self.push(Node::Dict(pairs));
            }
            0x85..=0x87 => {
                let n = usize::from(op - 0x84);
                let mut items = Vec::with_capacity(n);
                for _ in 0..n {
                    items.push(self.pop()?);
                }
                items.reverse();
                self.push(Node::Tuple(items));
            }
            b'a' => {
                let v = self.pop()?;
                let t = self.top()?;
                self.add(t, vec![v])?;
            }
            b's' => {
                let v = self.pop()?;
                let k = self.pop()?;
                let t = self.top()?;
                self.add(t, vec![k, v])?;
            }
            b'e' | b'u' | 0x90 => {
                let items = self.pop_mark()?;
                let t = self.top()?;
                self.add(t, items)?;
            }
            _ => {
                return Err(format!(
                    "it has an opcode llm-oom does not read ({op:#04x} at byte {})",
                    self.pos - 1
                ))
            }
        }
        Ok(())
    }

    /// The tree under `id` as a `Value`, shared parts copied; depth bounded (the guard checked it).
    fn materialise(&self, id: usize, depth: u32) -> Result<Value, String> {
        if depth > super::guard::MAX_DEPTH {
            return Err("it nests too deep".into());
        }
        let kids = |ids: &[usize]| -> Result<Vec<Value>, String> {
            ids.iter()
                .map(|k| self.materialise(*k, depth + 1))
                .collect()
        };
        let hashable = |ids: &[usize]| -> Result<BTreeSet<HashableValue>, String> {
            kids(ids)?
                .into_iter()
                .map(|v| v.into_hashable().map_err(|e| e.to_string()))
                .collect()
        };
        Ok(match self.arena.get(id) {
            Some(Node::Scalar(v)) => v.clone(),
            Some(Node::List(ids)) => Value::List(kids(ids)?),
            Some(Node::Tuple(ids)) => Value::Tuple(kids(ids)?),
            Some(Node::Set(ids)) => Value::Set(hashable(ids)?),
            Some(Node::FrozenSet(ids)) => Value::FrozenSet(hashable(ids)?),
            Some(Node::Dict(pairs)) => {
                let mut map = BTreeMap::new();
                for (k, v) in pairs {
                    let key = self
                        .materialise(*k, depth + 1)?
                        .into_hashable()
                        .map_err(|e| format!("a dict key is not hashable: {e}"))?;
                    map.insert(key, self.materialise(*v, depth + 1)?);
                }
                Value::Dict(map)
            }
            None => return Err("it is damaged: a reference to nothing".into()),
        })
    }
}

fn parse(text: &str) -> Result<u64, String> {
    text.trim()
        .parse()
        .map_err(|_| "it is damaged: a memo id is not a number".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `pickle.dumps(x, protocol=4)` of a dict whose frame list is shared by two blocks, the
    /// shape serde-pickle 1.2 refuses ("recursive structure found").
    #[test]
    fn a_shared_list_inside_a_shared_dict_is_read_twice() {
        // x = {'f': [{'a': 1}]}; y = [x['f'], x['f']]; pickle.dumps([x, y, y], 4)
        let data: &[u8] = b"\x80\x04\x95\x22\x00\x00\x00\x00\x00\x00\x00]\x94(}\x94\x8c\x01f\x94]\x94}\x94\x8c\x01a\x94K\x01sas]\x94(h\x03h\x03eh\x06e.";
        let v = decode(data).expect("decodes");
        let Value::List(items) = v else {
            panic!("a list")
        };
        assert_eq!(items.len(), 3);
        assert_eq!(items[1], items[2]);
        let Value::List(pair) = &items[1] else {
            panic!("a list")
        };
        assert_eq!(pair.len(), 2);
        assert!(serde_pickle::from_slice::<Value>(data, Default::default()).is_err());
    }

    #[test]
    fn scalars_of_every_width() {
        // pickle.dumps([0, 255, 65535, -2, 2**40, -(2**40), 1.5, True, None, 'é', b'x'], 4)
        let data: &[u8] = b"\x80\x04\x95\x35\x00\x00\x00\x00\x00\x00\x00]\x94(K\x00K\xffM\xff\xffJ\xfe\xff\xff\xff\x8a\x06\x00\x00\x00\x00\x00\x01\x8a\x06\x00\x00\x00\x00\x00\xffG?\xf8\x00\x00\x00\x00\x00\x00\x88N\x8c\x02\xc3\xa9\x94C\x01x\x94e.";
        let v = decode(data).expect("decodes");
        assert_eq!(
            v,
            Value::List(vec![
                Value::I64(0),
                Value::I64(255),
                Value::I64(65535),
                Value::I64(-2),
                Value::I64(1 << 40),
                Value::I64(-(1 << 40)),
                Value::F64(1.5),
                Value::Bool(true),
                Value::None,
                Value::String("é".into()),
                Value::Bytes(b"x".to_vec()),
            ])
        );
    }
}
