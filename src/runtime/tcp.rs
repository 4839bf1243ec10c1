//! The all-reduce of tensor-parallel ranks on the CPU, each its own process: rank 0 listens on a
//! loopback address, the others connect to it; an all-reduce sends every rank's tensor (f32) to
//! rank 0, which adds them in rank order (as [`super::parallel::InProcess`] does) and sends the
//! sum back. A rank that dies closes its socket, so the others' all-reduce fails instead of
//! waiting; a rank that stops calling is the parent's to end (it ends the world on a failure).

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

use candle_core::{DType, Tensor};

use super::parallel::{Communicator, Rank};
use super::{Result, RuntimeError};

pub struct Tcp {
    me: Rank,
    /// Rank 0: a stream to each of ranks 1…N−1, in rank order; the others: one, to rank 0.
    peers: Vec<TcpStream>,
}

fn io(what: &str, e: std::io::Error) -> RuntimeError {
    RuntimeError::Device(format!("tensor-parallel ranks on the CPU: {what}: {e}"))
}

impl Tcp {
    /// Meet the other ranks at `addr` (rank 0 listens there) within `within`.
    pub fn join(addr: &str, me: Rank, within: Duration) -> Result<Tcp> {
        let peers = if me.rank == 0 {
            let listener = TcpListener::bind(addr).map_err(|e| io("listening", e))?;
            let mut peers: Vec<(u32, TcpStream)> = Vec::new();
            while peers.len() + 1 < me.world {
                let (mut s, _) = listener.accept().map_err(|e| io("accepting a rank", e))?;
                let mut rank = [0u8; 4];
                s.read_exact(&mut rank).map_err(|e| io("greeting", e))?;
                peers.push((u32::from_le_bytes(rank), s));
            }
            peers.sort_by_key(|(r, _)| *r);
            peers.into_iter().map(|(_, s)| s).collect()
        } else {
            let start = Instant::now();
            let mut s = loop {
                match TcpStream::connect(addr) {
                    Ok(s) => break s,
                    Err(e) if start.elapsed() > within => return Err(io("reaching rank 0", e)),
                    Err(_) => std::thread::sleep(Duration::from_millis(20)),
                }
            };
            s.write_all(&(me.rank as u32).to_le_bytes())
                .map_err(|e| io("greeting", e))?;
            vec![s]
        };
        for p in &peers {
            p.set_nodelay(true).map_err(|e| io("setting up", e))?;
        }
        Ok(Tcp { me, peers })
    }
}

fn send(mut s: &TcpStream, v: &[f32]) -> std::io::Result<()> {
    let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
    s.write_all(&(v.len() as u64).to_le_bytes())?;
    s.write_all(&bytes)
}

fn receive(mut s: &TcpStream, n: usize) -> std::io::Result<Vec<f32>> {
    let mut len = [0u8; 8];
    s.read_exact(&mut len)?;
    if u64::from_le_bytes(len) != n as u64 {
        return Err(std::io::Error::other(
            "ranks all-reduced tensors of different sizes",
        ));
    }
    let mut bytes = vec![0u8; n.saturating_mul(4)];
    s.read_exact(&mut bytes)?;
    Ok(bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect())
}

impl Communicator for Tcp {
    fn rank(&self) -> Rank {
        self.me
    }

    fn all_reduce_sum(&self, t: &Tensor) -> candle_core::Result<Tensor> {
        let failed = |e: std::io::Error| {
            candle_core::Error::Msg(format!("the all-reduce with the other ranks failed: {e}"))
        };
        let mine = t.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()?;
        let sum = if self.me.rank == 0 {
            let mut sum = mine;
            for p in &self.peers {
                let theirs = receive(p, sum.len()).map_err(failed)?;
                sum.iter_mut().zip(theirs).for_each(|(a, b)| *a += b);
            }
            for p in &self.peers {
                send(p, &sum).map_err(failed)?;
            }
            sum
        } else {
            let hub = self
                .peers
                .first()
                .ok_or_else(|| candle_core::Error::Msg("no connection to rank 0".into()))?;
            send(hub, &mine).map_err(failed)?;
            receive(hub, mine.len()).map_err(failed)?
        };
        Tensor::from_vec(sum, t.shape(), t.device())?.to_dtype(t.dtype())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks_on_the_loopback_sum_in_rank_order_and_a_dead_rank_fails_the_others() {
        let addr = {
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().to_string()
        };
        let world = 3;
        let sums: Vec<Vec<f32>> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..world)
                .map(|rank| {
                    let addr = addr.clone();
                    s.spawn(move || {
                        let c = Tcp::join(&addr, Rank { rank, world }, Duration::from_secs(10))
                            .unwrap();
                        let t =
                            Tensor::new(&[rank as f32, 0.5], &candle_core::Device::Cpu).unwrap();
                        let sum = c.all_reduce_sum(&t).unwrap().to_vec1::<f32>().unwrap();
                        if rank == 1 {
                            // rank 1 leaves; rank 0's next all-reduce fails, and so does rank 2's
                            drop(c);
                            return sum;
                        }
                        assert!(c.all_reduce_sum(&t).is_err(), "rank {rank}");
                        sum
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for s in sums {
            assert_eq!(s, vec![3.0, 1.5]);
        }
    }
}
