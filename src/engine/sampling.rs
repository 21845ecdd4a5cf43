//! Choosing the next token from logits: greedy, or sampled with temperature, top-k, top-p
//! and a repetition penalty, from a seeded generator so runs are reproducible.

use super::constraint::LAZY_TRIES;
use anyhow::Result;
use candle_core::Tensor;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Sampling settings. `temperature <= 0` means greedy.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize, PartialEq)]
pub struct SamplingParams {
    /// Softmax temperature; 0 selects the most likely token.
    pub temperature: f32,
    /// Keep only the `top_k` most likely tokens (0 = all).
    pub top_k: usize,
    /// Keep the smallest set of tokens whose probability reaches `top_p` (1.0 = all).
    pub top_p: f32,
    /// Divide positive logits (multiply negative ones) of recently seen tokens by this.
    pub repetition_penalty: f32,
    /// How many recent tokens the penalty looks at.
    pub repeat_last_n: usize,
    /// Random seed.
    pub seed: u64,
}

impl Default for SamplingParams {
    fn default() -> Self {
        Self {
            temperature: 0.0,
            top_k: 40,
            top_p: 0.95,
            repetition_penalty: 1.0,
            repeat_last_n: 64,
            seed: 42,
        }
    }
}

/// A stateful sampler.
pub struct Sampler {
    params: SamplingParams,
    rng: StdRng,
}

impl Sampler {
    /// A sampler with `params`.
    pub fn new(params: SamplingParams) -> Self {
        let rng = StdRng::seed_from_u64(params.seed);
        Self { params, rng }
    }

    /// Pick the next token given `logits` (`[vocab]`) and the tokens so far.
    pub fn sample(&mut self, logits: &Tensor, history: &[u32]) -> Result<u32> {
        let mut logits: Vec<f32> = logits.to_vec1()?;
        self.sample_slice(&mut logits, history)
    }

    /// Like [`Self::sample`] on a plain slice (modified in place).
    pub fn sample_slice(&mut self, logits: &mut [f32], history: &[u32]) -> Result<u32> {
        Ok(self
            .sample_masked(logits, history, &mut |_| true)
            .unwrap_or(0))
    }

    /// Pick the next token among those `allowed` accepts (a logits mask asked lazily, most
    /// likely token first; see [`super::constraint`]). `None` when it accepts none.
    pub fn sample_masked(
        &mut self,
        logits: &mut [f32],
        history: &[u32],
        allowed: &mut dyn FnMut(u32) -> bool,
    ) -> Option<u32> {
        self.apply_penalty(logits, history);
        if self.params.temperature <= 0.0 {
            return greedy_masked(logits, allowed);
        }
        let p = &self.params;
        let mut order: Vec<usize> = (0..logits.len()).collect();
        order.sort_unstable_by(|&a, &b| logits[b].total_cmp(&logits[a]));
        let limit = if p.top_k > 0 { p.top_k } else { usize::MAX };
        let mut idx: Vec<usize> = Vec::with_capacity(limit.min(order.len()));
        for &i in &order {
            if idx.len() == limit || logits[i] == f32::NEG_INFINITY {
                break;
            }
            if allowed(i as u32) {
                idx.push(i);
            }
        }
        if idx.is_empty() {
            return None;
        }
        let max = logits[idx[0]];
        let mut probs: Vec<f32> = idx
            .iter()
            .map(|&i| ((logits[i] - max) / p.temperature).exp())
            .collect();
        let sum: f32 = probs.iter().sum();
        probs.iter_mut().for_each(|x| *x /= sum);
        if p.top_p < 1.0 {
            let mut acc = 0.0;
            let mut keep = probs.len();
            for (i, pr) in probs.iter().enumerate() {
                acc += pr;
                if acc >= p.top_p {
                    keep = i + 1;
                    break;
                }
            }
            probs.truncate(keep);
            idx.truncate(keep);
            let s: f32 = probs.iter().sum();
            probs.iter_mut().for_each(|x| *x /= s);
        }
        let r: f32 = self.rng.random();
        let mut acc = 0.0;
        for (i, pr) in probs.iter().enumerate() {
            acc += pr;
            if r < acc {
                return Some(idx[i] as u32);
            }
        }
        idx.last().map(|&i| i as u32)
    }

    fn apply_penalty(&self, logits: &mut [f32], history: &[u32]) {
        let p = &self.params;
        if p.repetition_penalty == 1.0 {
            return;
        }
        let start = history.len().saturating_sub(p.repeat_last_n);
        let mut seen = std::collections::HashSet::new();
        for &t in &history[start..] {
            if seen.insert(t) {
                if let Some(l) = logits.get_mut(t as usize) {
                    *l = if *l >= 0.0 {
                        *l / p.repetition_penalty
                    } else {
                        *l * p.repetition_penalty
                    };
                }
            }
        }
    }
}

/// Greedy choice under a mask: the largest logit `allowed` accepts. The best candidates are
/// asked one at a time ([`LAZY_TRIES`]); after that the rest are sorted and asked in order.
/// Identical to masking everything first and taking the argmax.
fn greedy_masked(logits: &mut [f32], allowed: &mut dyn FnMut(u32) -> bool) -> Option<u32> {
    for _ in 0..LAZY_TRIES {
        let t = argmax(logits);
        if logits[t as usize] == f32::NEG_INFINITY {
            return None;
        }
        if allowed(t) {
            return Some(t);
        }
        logits[t as usize] = f32::NEG_INFINITY;
    }
    // The rest in order, best first (ties: lower id first, as `argmax`): the first one
    // allowed is the argmax of the masked logits, found without asking about every token.
    let mut order: Vec<u32> = (0..logits.len() as u32)
        .filter(|&i| logits[i as usize] != f32::NEG_INFINITY)
        .collect();
    order.sort_unstable_by(|&a, &b| {
        logits[b as usize]
            .total_cmp(&logits[a as usize])
            .then(a.cmp(&b))
    });
    order.into_iter().find(|&t| allowed(t))
}

/// Index of the largest value (first one on ties).
pub fn argmax(xs: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &x) in xs.iter().enumerate() {
        if x > xs[best] {
            best = i;
        }
    }
    best as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn greedy_picks_max_and_penalty_changes_it() {
        let mut s = Sampler::new(SamplingParams::default());
        let mut l = vec![0.1, 3.0, 2.9];
        assert_eq!(s.sample_slice(&mut l.clone(), &[]).unwrap(), 1);
        let mut s = Sampler::new(SamplingParams {
            repetition_penalty: 1.5,
            ..Default::default()
        });
        assert_eq!(s.sample_slice(&mut l, &[1]).unwrap(), 2);
    }

    #[test]
    fn sampling_is_seeded_and_respects_top_k() {
        let params = SamplingParams {
            temperature: 1.0,
            top_k: 2,
            top_p: 1.0,
            ..Default::default()
        };
        let logits = vec![5.0, 4.9, -10.0, 4.8];
        let run = |seed| {
            let mut s = Sampler::new(SamplingParams {
                seed,
                ..params.clone()
            });
            (0..50)
                .map(|_| s.sample_slice(&mut logits.clone(), &[]).unwrap())
                .collect::<Vec<_>>()
        };
        let a = run(7);
        assert_eq!(a, run(7));
        assert!(
            a.iter().all(|&t| t == 0 || t == 1),
            "top-k 2 must exclude tokens 2 and 3: {a:?}"
        );
        assert!(a.contains(&0) && a.contains(&1));
    }

    #[test]
    fn masked_greedy_equals_argmax_of_the_masked_logits() {
        // Refuse the 100 best tokens: the lazy tries run out and the full mask decides.
        let logits: Vec<f32> = (0..500).map(|i| ((i * 37) % 500) as f32).collect();
        let mut refused: Vec<u32> = (0..500u32).collect();
        refused.sort_by(|&a, &b| logits[b as usize].total_cmp(&logits[a as usize]));
        for n in [0usize, 1, 10, 100, 499] {
            let bad: std::collections::HashSet<u32> = refused[..n].iter().copied().collect();
            let mut s = Sampler::new(SamplingParams::default());
            let got = s.sample_masked(&mut logits.clone(), &[], &mut |t| !bad.contains(&t));
            assert_eq!(got, Some(refused[n]), "{n} refused");
        }
        let mut s = Sampler::new(SamplingParams::default());
        assert_eq!(
            s.sample_masked(&mut logits.clone(), &[], &mut |_| false),
            None
        );
    }

    #[test]
    fn masked_sampling_never_draws_a_refused_token() {
        let mut s = Sampler::new(SamplingParams {
            temperature: 1.0,
            top_k: 3,
            top_p: 1.0,
            ..Default::default()
        });
        let logits = vec![5.0, 4.9, 4.8, 4.7, -3.0];
        for _ in 0..100 {
            let t = s
                .sample_masked(&mut logits.clone(), &[], &mut |t| t != 0)
                .unwrap();
            assert!([1, 2, 3].contains(&t), "{t}");
        }
    }
}
