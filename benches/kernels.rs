//! Quantized matmul kernels on synthetic weights of the shapes the bundled models use:
//! decode (1 activation row: GB/s of weights streamed) and prefill (512 rows: GMAC/s),
//! for every kernel this CPU runs.
//!
//! Run with `cargo bench --bench kernels`.

use quire::engine::kernels::formats::Format;
use quire::engine::kernels::{matmul, Activations, Isa, QuantMatrix};
use std::time::Instant;

fn best_of(runs: usize, mut f: impl FnMut()) -> f64 {
    (0..runs)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_secs_f64()
        })
        .fold(f64::INFINITY, f64::min)
}

fn main() {
    let shapes = [
        ("0.5B ffn_up  Q5_0", Format::Q5_0, 4864, 896),
        ("0.5B output  Q8_0", Format::Q8_0, 151_936, 896),
        ("1.5B ffn_up  Q4_K", Format::Q4K, 8960, 1536),
        ("1.5B ffn_down Q6_K", Format::Q6K, 1536, 8960),
    ];
    println!(
        "{:<20} {:<9} {:>12} {:>15} {:>14}",
        "matrix", "kernel", "decode GB/s", "batch 4 GMAC/s", "prefill GMAC/s"
    );
    for (name, format, n, k) in shapes {
        let w = QuantMatrix::synthetic(format, n, k, 7).expect("synthetic matrix");
        for isa in Isa::available() {
            let x1: Vec<f32> = (0..k)
                .map(|i| ((i * 31 % 97) as f32 - 48.0) / 50.0)
                .collect();
            let a1 = Activations::quantize(format, &x1, 1, k);
            let mut y1 = vec![0.0; n];
            let t1 = best_of(30, || matmul(isa, &w, &a1, &mut y1));
            let x4: Vec<f32> = (0..4 * k)
                .map(|i| ((i * 31 % 97) as f32 - 48.0) / 50.0)
                .collect();
            let a4 = Activations::quantize(format, &x4, 4, k);
            let mut y4 = vec![0.0; 4 * n];
            let t4 = best_of(10, || matmul(isa, &w, &a4, &mut y4));
            let m = if isa == Isa::Portable { 16 } else { 512 };
            let xm: Vec<f32> = (0..m * k)
                .map(|i| ((i * 31 % 97) as f32 - 48.0) / 50.0)
                .collect();
            let am = Activations::quantize(format, &xm, m, k);
            let mut ym = vec![0.0; m * n];
            let tm = best_of(2, || matmul(isa, &w, &am, &mut ym));
            println!(
                "{:<20} {:<9} {:>12.1} {:>15.1} {:>14.1}",
                name,
                format!("{isa:?}"),
                w.byte_len() as f64 / t1 / 1e9,
                (4 * n * k) as f64 / t4 / 1e9,
                (m * n * k) as f64 / tm / 1e9
            );
        }
    }
}
