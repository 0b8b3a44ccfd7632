// Mixed-precision GEMM with Hopper's warpgroup MMA: wgmma.mma_async.m64n128k16 (sm_90a only), fp16 /
// bf16 operands, fp32 accumulation, C rounded to the operand type.
//
// UNVERIFIED ON HARDWARE. It compiles for sm_90a and its SASS holds HGMMA; its index math and shared-
// memory layout pass the CPU model in tests/test_mma_layout.py, which encodes our reading of the PTX ISA
// (descriptors, 128-byte swizzle, accumulator fragments) but is not the hardware. It is kept out of the
// default path: provider `cupy_wgmma`, named in no bench.toml profile.
//
// Structure: BM = 64 x (warpgroups) rows, BN = 128 x (n128 blocks) columns, BK = 64. Every thread copies
// tiles with the same cp.async loaders as gemm_mma.cu (mma_common.cuh) into K-major tiles of 64-element
// (128-byte) rows whose 16-byte chunks are XOR-swizzled with row & 7: with a 1024-byte aligned tile base
// that is the canonical K-major 128-byte-swizzle layout wgmma reads through a matrix descriptor (PTX ISA
// 9.7.15.5.1.2). Each warpgroup multiplies its m64 rows by the whole BN with wgmma; no TMA, no producer /
// consumer split, no register-sourced A. Both operands must be K-major (A row-major, B column-major):
// the wrapper copies other layouts.
#include "mma_common.cuh"

namespace wg {

constexpr int BK = 64;             // one 128-byte swizzle row of 16-bit elements
constexpr int ROW_BYTES = 128;
constexpr int ATOM_BYTES = 1024;  // 8 rows: the 128-byte swizzle pattern repeats every 1024 bytes

// Matrix descriptor of a K-major operand in the 128-byte swizzle layout (PTX ISA 9.7.15.5.1.2.2):
// bits 0-13 start address >> 4; 16-29 leading-dimension byte offset >> 4, unused by swizzled K-major
// layouts (set to 1, as the ISA says it is assumed); 32-45 stride-dimension byte offset >> 4, from one
// 8-row group to the next (1024 bytes); 49-51 base offset 0 (tile bases are 1024-byte aligned; a start
// address advanced by 32-byte k16 steps inside the row keeps the pattern's phase); 62-63 swizzle mode 1
// (128-byte).
MMA_HD unsigned long long desc_k_major_sw128(mma::u32 smem_addr) {
  return (unsigned long long)((smem_addr & 0x3FFFF) >> 4) | (1ull << 16) |
         ((unsigned long long)(ATOM_BYTES >> 4) << 32) | (1ull << 62);
}

// Accumulator fragment of wgmma .m64nNk16 with .f32 D (PTX ISA 9.7.15.5.1.1.1, the D figure): register
// i of thread t of the warpgroup holds row 16 * (t / 32) + (t % 32) / 4 + 8 * ((i % 4) / 2) and column
// 8 * (i / 4) + 2 * (t % 4) + (i % 2): per warp, the m16n8 C fragments of mma.sync stacked along N.
MMA_HD void acc_coords(int t, int i, int& row, int& col) {
  row = 16 * (t >> 5) + ((t & 31) >> 2) + 8 * ((i & 3) >> 1);
  col = 8 * (i >> 2) + 2 * (t & 3) + (i & 1);
}

template <int BM_, int BN_, int STAGES_>
struct Config {
  static constexpr int BM = BM_, BN = BN_, STAGES = STAGES_;
  static constexpr int WARPGROUPS = BM / 64, THREADS = 128 * WARPGROUPS, NB = BN / 128;
  using ATile = mma::OperandTile<BM, BK, true>;
  using BTile = mma::OperandTile<BN, BK, true>;
  static constexpr int STAGE_BYTES = 2 * (ATile::ELEMS + BTile::ELEMS);
  // + 1024: the dynamic shared memory base is aligned up to the swizzle pattern at run time
  static constexpr int SMEM_BYTES = STAGES * STAGE_BYTES + ATOM_BYTES;
  static_assert(BM % 64 == 0 && BN % 128 == 0 && STAGES >= 2, "m64 warpgroups, n128 blocks");
  static_assert(ATile::ELEMS * 2 % ATOM_BYTES == 0 && BTile::ELEMS * 2 % ATOM_BYTES == 0, "1024-byte aligned tiles");
};

}  // namespace wg
#undef DAWNSCOPE_WGMMA_M64N128K16

#if defined(__CUDACC__)
namespace wg {

// Orders this thread's earlier generic-proxy shared-memory writes (the cp.async copies) before later
// async-proxy reads (wgmma), PTX ISA 9.7.15.4; a barrier then extends that to the other threads.
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
__device__ __forceinline__ void fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// Keeps the compiler from moving accumulator reads or writes across the asynchronous wgmma.
__device__ __forceinline__ void fence_operand(float& x) { asm volatile("" : "+f"(x)::"memory"); }

// One wgmma m64n128k16 with fp32 accumulators; AB is the operand type's PTX name ("bf16" or "f16").
#define DAWNSCOPE_WGMMA_M64N128K16(AB) \
    asm volatile( \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n" \
      "wgmma.mma_async.sync.aligned.m64n128k16.f32." AB "." AB " {" \
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63" \
      "}, %64, %65, p, 1, 1, 0, 0;\n}\n" \
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), \
        "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), \
        "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), \
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), \
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]) \
      : "l"(da), "l"(db), "r"(1));

// d[0..63] += A (m64 x k16, descriptor da) * B (k16 x n128, descriptor db of n128 x k16 K-major).
template <class T>
__device__ __forceinline__ void mma_m64n128k16(float (&d)[64], unsigned long long da, unsigned long long db) {
  if constexpr (mma::same_type<T, mma::BF16>::value) {
    DAWNSCOPE_WGMMA_M64N128K16("bf16")
  } else {
    DAWNSCOPE_WGMMA_M64N128K16("f16")
  }
}

}  // namespace wg

template <class T, int BM, int BN, int STAGES>
__global__ void __launch_bounds__(128 * (BM / 64), 1)
gemm_wgmma(const mma::u16* __restrict__ a, const mma::u16* __restrict__ b, mma::u16* __restrict__ c,
           int m, int n, int k, mma::i64 lda, mma::i64 ldb, int ldc,
           mma::i64 batch_stride_a, mma::i64 batch_stride_b, int group_m) {
  using Cfg = wg::Config<BM, BN, STAGES>;
  using ATile = typename Cfg::ATile;
  int tm, tn;
  mma::tile_of_block(blockIdx.x, (m + BM - 1) / BM, (n + BN - 1) / BN, group_m, tm, tn);
  a += blockIdx.z * batch_stride_a;
  b += blockIdx.z * batch_stride_b;
  c += (mma::i64)blockIdx.z * m * ldc;

  const mma::MatrixLoader<ATile, Cfg::THREADS> la(a, lda, tm * BM, m, k, threadIdx.x);
  const mma::MatrixLoader<typename Cfg::BTile, Cfg::THREADS> lb(b, ldb, tn * BN, n, k, threadIdx.x);
  const mma::u32 smem = (mma::smem_addr(mma::dynamic_smem()) + wg::ATOM_BYTES - 1) & ~(mma::u32)(wg::ATOM_BYTES - 1);
  const int warpgroup = threadIdx.x >> 7;
  const int k_tiles = (k + wg::BK - 1) / wg::BK;

  float acc[Cfg::NB][64];
#pragma unroll
  for (int h = 0; h < Cfg::NB; ++h)
#pragma unroll
    for (int i = 0; i < 64; ++i) acc[h][i] = 0.0f;

#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) {
    if (s < k_tiles) {
      la.issue(smem + s * Cfg::STAGE_BYTES, s * wg::BK);
      lb.issue(smem + s * Cfg::STAGE_BYTES + 2 * ATile::ELEMS, s * wg::BK);
    }
    mma::cp_async_commit();
  }
  for (int kt = 0; kt < k_tiles; ++kt) {
    mma::cp_async_wait<STAGES - 2>();  // k-tile kt has landed (this thread's copies)
    wg::fence_proxy_async();
    __syncthreads();  // ... everyone's, and every warpgroup finished reading the stage refilled next
    const int next = kt + STAGES - 1;
    if (next < k_tiles) {
      const int s = next % STAGES;
      la.issue(smem + s * Cfg::STAGE_BYTES, next * wg::BK);
      lb.issue(smem + s * Cfg::STAGE_BYTES + 2 * ATile::ELEMS, next * wg::BK);
    }
    mma::cp_async_commit();

    const mma::u32 a_tile = smem + (kt % STAGES) * Cfg::STAGE_BYTES + warpgroup * 64 * wg::ROW_BYTES;
    const mma::u32 b_tile = smem + (kt % STAGES) * Cfg::STAGE_BYTES + 2 * ATile::ELEMS;
#pragma unroll
    for (int h = 0; h < Cfg::NB; ++h)
#pragma unroll
      for (int i = 0; i < 64; ++i) wg::fence_operand(acc[h][i]);
    wg::fence();
#pragma unroll
    for (int kk = 0; kk < wg::BK; kk += 16) {  // a k16 step is 32 bytes further along the 128-byte rows
      const unsigned long long da = wg::desc_k_major_sw128(a_tile + 2 * kk);
#pragma unroll
      for (int h = 0; h < Cfg::NB; ++h) {
        wg::mma_m64n128k16<T>(acc[h], da, wg::desc_k_major_sw128(b_tile + h * 128 * wg::ROW_BYTES + 2 * kk));
      }
    }
    wg::commit();
    // Drained before the next iteration's barrier, after which this stage may be refilled.
    wg::wait<0>();
#pragma unroll
    for (int h = 0; h < Cfg::NB; ++h)
#pragma unroll
      for (int i = 0; i < 64; ++i) wg::fence_operand(acc[h][i]);
  }
  mma::cp_async_wait<0>();

  // Epilogue: pairs of neighbours (registers 2q, 2q + 1) as 4-byte stores; rows below m, columns below
  // ldc (a multiple of 8 >= n, allocated by the wrapper), as in mma::store_tile.
  const int t = threadIdx.x & 127;
#pragma unroll
  for (int h = 0; h < Cfg::NB; ++h) {
#pragma unroll
    for (int q = 0; q < 32; ++q) {
      int r, cc;
      wg::acc_coords(t, 2 * q, r, cc);
      const int row = tm * BM + warpgroup * 64 + r, col = tn * BN + h * 128 + cc;
      if (row < m && col < ldc) {
        *reinterpret_cast<mma::u32*>(c + (mma::i64)row * ldc + col) = mma::pack2<T>(acc[h][2 * q], acc[h][2 * q + 1]);
      }
    }
  }
}
#endif  // __CUDACC__
