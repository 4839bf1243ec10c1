//! With the `cuda` feature, the runtime's own kernel (src/runtime/kernels/masked_softmax.cu) is
//! compiled to PTX the way candle compiles its kernels (cudaforge, nvcc from the toolkit or
//! scripts/setup-cuda.sh), and src/runtime/masked_softmax.rs includes it. Without it, nothing.

fn main() {
    println!("cargo::rerun-if-changed=build.rs");
    #[cfg(feature = "cuda")]
    if let Err(e) = cuda::build() {
        println!("cargo::error=compiling src/runtime/kernels: {e}");
    }
}

#[cfg(feature = "cuda")]
mod cuda {
    pub fn build() -> cudaforge::Result<()> {
        let out = std::path::PathBuf::from(std::env::var("OUT_DIR").unwrap_or_default());
        cudaforge::KernelBuilder::new()
            .source_files(["src/runtime/kernels/masked_softmax.cu"])
            .arg("-std=c++17")
            .arg("-O3")
            .build_ptx()?
            .write(out.join("ptx.rs"))
    }
}
