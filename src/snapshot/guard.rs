//! A pre-scan of the pickle's opcodes before `serde-pickle` sees it, so that a hostile or damaged file
//! is refused in one pass and bounded memory: only the data opcodes a `pickle.dump` of dicts, lists,
//! strings and numbers uses are allowed (no GLOBAL, REDUCE, BUILD, persistent ids or extensions:
//! nothing that would name code), every length must fit in the file, and the structure the file
//! describes — counting each memo reference (`BINGET`) as the copy `serde-pickle` makes of it — must
//! stay under [`MAX_DEPTH`] levels and [`MAX_EXPANDED_BYTES`] once decoded ("billion laughs" refused).

use std::collections::HashMap;

/// Deepest nesting of containers accepted. A snapshot is 7 levels deep (dict → segments → segment →
/// blocks → block → frames → frame); the decoder recurses, so depth is what protects its stack.
pub const MAX_DEPTH: u32 = 64;
/// Estimated decoded size accepted: 32 bytes per value plus its payload, memo copies included.
pub const MAX_EXPANDED_BYTES: u64 = 4 << 30;
const NODE_COST: u64 = 32;

/// A value on the scan's stack: a scalar of some decoded cost, or a container in the arena.
#[derive(Clone, Copy)]
enum Item {
    Scalar(u64),
    Obj(u32),
}

#[derive(Default)]
struct Obj {
    /// Its own cost and that of the scalars put in it.
    own: u64,
    kids: Vec<u32>,
}

struct Scan<'a> {
    data: &'a [u8],
    pos: usize,
    stack: Vec<Item>,
    marks: Vec<usize>,
    memo: HashMap<u64, Item>,
    arena: Vec<Obj>,
}

/// Checks `data` as described in the module docs; `Err` is one line saying what is wrong.
pub fn check(data: &[u8]) -> Result<(), String> {
    let mut s = Scan {
        data,
        pos: 0,
        stack: Vec::new(),
        marks: Vec::new(),
        memo: HashMap::new(),
        arena: Vec::new(),
    };
    let root = s.run()?;
    let (cost, depth) = s.measure(root)?;
    if depth > MAX_DEPTH {
        return Err(format!(
            "it nests {depth} levels deep (at most {MAX_DEPTH}); a memory snapshot is about 7"
        ));
    }
    if cost > MAX_EXPANDED_BYTES {
        return Err(format!(
            "it would decode to more than {} GiB (memo references multiply it)",
            MAX_EXPANDED_BYTES >> 30
        ));
    }
    Ok(())
}

impl Scan<'_> {
    fn take(&mut self, n: u64) -> Result<&[u8], String> {
        let left = (self.data.len() - self.pos) as u64;
        if n > left {
            return Err(format!(
                "it is truncated or damaged: a length of {n} bytes at byte {} runs past the end",
                self.pos
            ));
        }
        let start = self.pos;
        self.pos += n as usize;
        Ok(&self.data[start..self.pos])
    }

    fn uint(&mut self, width: u64) -> Result<u64, String> {
        let b = self.take(width)?;
        Ok(b.iter()
            .rev()
            .fold(0u64, |acc, x| (acc << 8) | u64::from(*x)))
    }

    fn line(&mut self) -> Result<&[u8], String> {
        let rest = &self.data[self.pos..];
        let Some(end) = rest.iter().position(|b| *b == b'\n') else {
            return Err("it is truncated: a text field has no end of line".into());
        };
        self.take(end as u64 + 1)
    }

    fn pop(&mut self) -> Result<Item, String> {
        let floor = self.marks.last().copied().unwrap_or(0);
        if self.stack.len() <= floor {
            return Err(format!(
                "it is damaged: the stack is empty at byte {}",
                self.pos
            ));
        }
        self.stack
            .pop()
            .ok_or_else(|| "it is damaged: empty stack".to_string())
    }

    fn pop_mark(&mut self) -> Result<Vec<Item>, String> {
        let Some(m) = self.marks.pop() else {
            return Err(format!("it is damaged: no MARK before byte {}", self.pos));
        };
        Ok(self.stack.split_off(m.min(self.stack.len())))
    }

    fn new_obj(&mut self, items: &[Item]) -> Item {
        let id = self.arena.len() as u32;
        self.arena.push(Obj {
            own: NODE_COST,
            kids: Vec::new(),
        });
        self.add_to(id, items);
        Item::Obj(id)
    }

    fn add_to(&mut self, id: u32, items: &[Item]) {
        let Some(o) = self.arena.get_mut(id as usize) else {
            return;
        };
        for it in items {
            match *it {
                Item::Scalar(c) => o.own = o.own.saturating_add(c),
                Item::Obj(k) => o.kids.push(k),
            }
        }
    }

    fn add_to_top(&mut self, items: &[Item]) -> Result<(), String> {
        match self.stack.last().copied() {
            Some(Item::Obj(id)) => {
                self.add_to(id, items);
                Ok(())
            }
            _ => Err(format!(
                "it is damaged: items added to a non-container at byte {}",
                self.pos
            )),
        }
    }

    fn memo_put(&mut self, id: u64) -> Result<(), String> {
        let top = *self
            .stack
            .last()
            .ok_or("it is damaged: memo of an empty stack")?;
        self.memo.insert(id, top);
        Ok(())
    }

    fn memo_get(&mut self, id: u64) -> Result<(), String> {
        let it = *self
            .memo
            .get(&id)
            .ok_or_else(|| format!("it is damaged: memo {id} is read before it is written"))?;
        self.stack.push(it);
        Ok(())
    }

    fn scalar(&mut self, payload: u64) {
        self.stack
            .push(Item::Scalar(NODE_COST.saturating_add(payload)));
    }

    fn fixed(&mut self, width: u64) -> Result<(), String> {
        self.take(width)?;
        self.scalar(0);
        Ok(())
    }

    fn sized(&mut self, width: u64) -> Result<(), String> {
        let n = self.uint(width)?;
        self.take(n)?;
        self.scalar(n);
        Ok(())
    }

    fn run(&mut self) -> Result<Item, String> {
        loop {
            let Some(&op) = self.data.get(self.pos) else {
                return Err("it is truncated: it ends before its STOP opcode".into());
            };
            self.pos += 1;
            if op == b'.' {
                return self.pop();
            }
            self.step(op)?;
        }
    }

    fn step(&mut self, op: u8) -> Result<(), String> {
        match op {
            0x80 => drop(self.take(1)?), // PROTO
            0x95 => drop(self.take(8)?), // FRAME
            b'(' => self.marks.push(self.stack.len()),
            b'0' => drop(self.pop()?),
            b'1' => drop(self.pop_mark()?),
            b'2' => {
                let top = self.pop()?;
                self.stack.extend([top, top]);
            }
            b'p' => {
                let id = parse_ascii(self.line()?)?;
                self.memo_put(id)?;
            }
            b'q' => {
                let id = self.uint(1)?;
                self.memo_put(id)?;
            }
            b'r' => {
                let id = self.uint(4)?;
                self.memo_put(id)?;
            }
            0x94 => {
                let id = self.memo.len() as u64;
                self.memo_put(id)?;
            }
            b'g' => {
                let id = parse_ascii(self.line()?)?;
                self.memo_get(id)?;
            }
            b'h' => {
                let id = self.uint(1)?;
                self.memo_get(id)?;
            }
            b'j' => {
                let id = self.uint(4)?;
                self.memo_get(id)?;
            }
            b'N' | 0x88 | 0x89 => self.scalar(0),
            b'J' => self.fixed(4)?,
            b'K' => self.fixed(1)?,
            b'M' => self.fixed(2)?,
            b'G' => self.fixed(8)?,
            b'I' | b'L' | b'F' | b'S' | b'V' => {
                let n = self.line()?.len() as u64;
                self.scalar(n);
            }
            0x8a | b'U' | b'C' | 0x8c => self.sized(1)?,
            0x8b | b'T' | b'X' | b'B' => self.sized(4)?,
            0x8d | 0x8e | 0x96 => self.sized(8)?,
            b']' | b')' | b'}' | 0x8f => {
                let it = self.new_obj(&[]);
                self.stack.push(it);
            }
            b'l' | b't' | b'd' | 0x91 => {
                let items = self.pop_mark()?;
                let it = self.new_obj(&items);
                self.stack.push(it);
            }
            0x85..=0x87 => {
                let n = usize::from(op - 0x84);
                let mut items = Vec::with_capacity(n);
                for _ in 0..n {
                    items.push(self.pop()?);
                }
                let it = self.new_obj(&items);
                self.stack.push(it);
            }
            b'a' => {
                let v = self.pop()?;
                self.add_to_top(&[v])?;
            }
            b's' => {
                let v = self.pop()?;
                let k = self.pop()?;
                self.add_to_top(&[k, v])?;
            }
            b'e' | b'u' | 0x90 => {
                let items = self.pop_mark()?;
                self.add_to_top(&items)?;
            }
            b'c' | 0x93 | b'R' | b'b' | b'i' | b'o' | 0x81 | 0x92 | 0x82..=0x84 | b'P' | b'Q' => {
                return Err(format!(
                    "it asks to build Python objects (opcode {op:#04x} at byte {}); a memory snapshot holds only dicts, lists, strings and numbers, so llm-oom does not run it",
                    self.pos - 1
                ));
            }
            _ => {
                return Err(format!(
                    "it has an opcode llm-oom does not read ({op:#04x} at byte {}); is it a pickle of torch.cuda.memory._snapshot()?",
                    self.pos - 1
                ));
            }
        }
        Ok(())
    }

    /// Decoded cost and depth of `root`, memo copies included, without recursion; refuses cycles.
    fn measure(&self, root: Item) -> Result<(u64, u32), String> {
        let Item::Obj(root) = root else {
            return Ok((NODE_COST, 0));
        };
        // 0 = not seen, 1 = open, 2 = done.
        let mut state = vec![0u8; self.arena.len()];
        let mut done: Vec<(u64, u32)> = vec![(0, 0); self.arena.len()];
        let mut work = vec![(root, false)];
        while let Some((id, closing)) = work.pop() {
            let i = id as usize;
            let obj = &self.arena[i];
            if closing {
                let mut cost = obj.own;
                let mut depth = 0u32;
                for k in &obj.kids {
                    let (c, d) = done[*k as usize];
                    cost = cost.saturating_add(c);
                    depth = depth.max(d);
                }
                done[i] = (cost.min(u64::MAX / 2), depth.saturating_add(1));
                state[i] = 2;
                if depth > MAX_DEPTH {
                    return Ok(done[i]);
                }
                continue;
            }
            match state[i] {
                2 => continue,
                1 => return Err("it holds a structure that contains itself".into()),
                _ => {}
            }
            state[i] = 1;
            work.push((id, true));
            for k in &obj.kids {
                match state[*k as usize] {
                    0 => work.push((*k, false)),
                    1 => return Err("it holds a structure that contains itself".into()),
                    _ => {}
                }
            }
        }
        Ok(done[root as usize])
    }
}

fn parse_ascii(b: &[u8]) -> Result<u64, String> {
    std::str::from_utf8(b)
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .ok_or_else(|| "it is damaged: a memo id is not a number".to_string())
}
