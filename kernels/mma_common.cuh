// Tensor Core building blocks shared by gemm_mma.cu and conv_implicit.cu (sm_80 and newer):
// swizzled shared-memory tiles filled by a multi-stage cp.async pipeline, ldmatrix fragment loads,
// mma.sync.m16n8k16 with fp16 / bf16 operands and fp32 accumulators, and a predicated epilogue.
//
// Everything is inline PTX, so NVRTC needs no header at all (mma.h and cuda_fp16.h are not used):
// operands travel as raw 16-bit patterns (u16) and only the epilogue converts, with cvt.rn.
//
// The index math and the loaders' address computation (first section) are plain C++ that also compile
// on the host: tests/test_mma_layout.py builds them with g++ and replays each kernel's CTA schedule
// against a numpy model of the PTX ISA (ldmatrix, mma fragments, cp.async zero-fill), so the functions
// the kernels call are the functions the CPU tests run. Section numbers cite the PTX ISA 8.x:
//   9.7.9.25    cp.async (and 9.7.9.25.3.x commit_group / wait_group)
//   9.7.14.5.15 ldmatrix
//   9.7.14.5.8  "Matrix Fragments for mma.m16n8k16 with floating point type"
//   9.7.9.21    cvt (f32 -> f16 / bf16, and the packed .f16x2 / .bf16x2 forms)
#pragma once

#if defined(__CUDACC__)
#define MMA_HD __host__ __device__ __forceinline__
#else  // host C++: the layout tests compile this header with g++
#define MMA_HD inline
#endif

namespace mma {

typedef unsigned short u16;
typedef unsigned int u32;
typedef long long i64;

// Element type tags: the kernels move raw 16-bit patterns; the tag picks the mma and cvt variants.
struct F16 {};
struct BF16 {};
template <class A, class B>
struct same_type {
  static constexpr bool value = false;
};
template <class A>
struct same_type<A, A> {
  static constexpr bool value = true;
};

// =====================================================================================================
// Index math (host and device)
// =====================================================================================================

// Shared-memory tiles are rows of 16-byte chunks (8 fp16 / bf16 elements). ldmatrix reads one chunk
// from each of 8 consecutive rows at the same logical chunk column; unswizzled, rows whose byte offsets
// differ by a multiple of 128 fall into the same banks (up to 8-way conflicts). XOR-ing the chunk index
// with bits of the row index spreads those 8 chunks over 8 distinct 16-byte bank groups (all 32 banks):
// for rows of >= 8 chunks (>= 128 B) with row & 7 (the pattern Hopper calls the 128-byte swizzle), for
// 4-chunk rows with (row >> 1) & 3, for 2-chunk rows with (row >> 2) & 1. A bijection on each row.
template <int ROW_CHUNKS>
MMA_HD int swizzle_chunk(int row, int chunk) {
  static_assert(ROW_CHUNKS == 2 || ROW_CHUNKS == 4 || ROW_CHUNKS % 8 == 0, "unsupported tile row width");
  if constexpr (ROW_CHUNKS % 8 == 0) {
    return chunk ^ (row & 7);
  } else if constexpr (ROW_CHUNKS == 4) {
    return chunk ^ ((row >> 1) & 3);
  } else {
    return chunk ^ ((row >> 2) & 1);
  }
}

// A ROWS x COLS tile of 16-bit elements, row-major with swizzled 16-byte chunks.
template <int ROWS_, int COLS_>
struct SmemTile {
  static constexpr int ROWS = ROWS_;
  static constexpr int COLS = COLS_;
  static constexpr int CHUNKS = COLS / 8;  // 16-byte chunks per row
  static constexpr int ELEMS = ROWS * COLS;
  static_assert(COLS % 8 == 0, "rows are whole 16-byte chunks");
  // Element offset of (row, col); a chunk's 8 elements stay contiguous, so col & 7 passes through.
  MMA_HD static int offset(int row, int col) { return row * COLS + swizzle_chunk<CHUNKS>(row, col >> 3) * 8 + (col & 7); }
};

// One GEMM operand's tile: D (= BM rows of A, or BN columns of B) by BK along the reduction dimension.
// It is stored the way the operand is contiguous in global memory, because cp.async copies 16 contiguous
// bytes and cannot transpose: K-major ("k contiguous": A row-major, B column-major) as D rows of BK,
// D-major (A column-major, B row-major) as BK rows of D. ldmatrix (.trans for D-major) turns either
// into the same mma fragments.
template <int D, int BK, bool KMAJOR>
struct OperandTile : SmemTile<(KMAJOR ? D : BK), (KMAJOR ? BK : D)> {
  static constexpr bool K_MAJOR = KMAJOR;
};

// ldmatrix.x4 (PTX ISA 9.7.14.5.15): thread 8*i + r supplies the address of row r of 8x8 matrix i, and
// register i of thread t receives row t / 4, elements 2 * (t % 4) and +1 of matrix i (with .trans: of
// the transposed matrix). We load a 16 (d) x 16 (k) block as four matrices ordered
//   matrix 0: d 0-7, k 0-7;  1: d 8-15, k 0-7;  2: d 0-7, k 8-15;  3: d 8-15, k 8-15
// so that, by 9.7.14.5.8, registers {0, 1, 2, 3} are the A fragment a0..a7 of an m16 x k16 block, and
// {0, 2} / {1, 3} the B fragments b0..b3 of the k16 x n8 blocks d 0-7 / d 8-15.
// K-major tiles hold d along rows: matrix i starts at row d0 + 8 * (i & 1), column k0 + 8 * (i >> 1),
// and a thread receives (d = t / 4, k = 2 * (t % 4) + {0, 1}) as the fragments need.
// D-major tiles hold k along rows: matrix i starts at row k0 + 8 * (i >> 1), column d0 + 8 * (i & 1),
// and .trans hands the thread the same (d, k) pairs.
template <bool KMAJOR>
MMA_HD void ldsm_coords(int lane, int d0, int k0, int& row, int& col) {
  const int r = lane & 7, i = lane >> 3;
  if constexpr (KMAJOR) {
    row = d0 + (i & 1) * 8 + r;
    col = k0 + (i >> 1) * 8;
  } else {
    row = k0 + (i >> 1) * 8 + r;
    col = d0 + (i & 1) * 8;
  }
}

// The B fragment of n8 block j: ldmatrix block j / 2 holds two n8 blocks, registers {0, 2} for its
// first (d 0-7) and {1, 3} for its second (d 8-15); see ldsm_coords.
MMA_HD void b_frag_regs(int j, int& block, int& reg0, int& reg1) {
  block = j >> 1;
  reg0 = j & 1;
  reg1 = (j & 1) + 2;
}

// Accumulator fragment of mma.m16n8k16 with .f32 C/D (PTX ISA 9.7.14.5.8): element e (0..3) of thread
// `lane` holds row (lane >> 2) + 8 * (e >> 1), column 2 * (lane & 3) + (e & 1) of the 16 x 8 block.
MMA_HD void acc_coords(int lane, int e, int& row, int& col) {
  row = (lane >> 2) + 8 * (e >> 1);
  col = 2 * (lane & 3) + (e & 1);
}

// Global -> shared copy assignment: the tile's 16-byte chunks are numbered row by row and thread `tid`
// copies chunks tid, tid + THREADS, ...: neighbouring threads read neighbouring chunks (coalesced).
// With THREADS a multiple of the row's chunk count, a thread keeps one chunk column for every row it
// copies (the im2col loader decodes that column once per k-tile).
template <class Tile, int THREADS>
struct CopyPlan {
  static constexpr int ITERS = Tile::ROWS * Tile::CHUNKS / THREADS;
  static constexpr int ROW_STEP = THREADS / Tile::CHUNKS;
  static_assert(Tile::ROWS * Tile::CHUNKS % THREADS == 0, "tile chunks must divide evenly among threads");
  static_assert(THREADS % Tile::CHUNKS == 0, "each thread must keep one chunk column");
  MMA_HD static int row(int tid, int it) { return tid / Tile::CHUNKS + it * ROW_STEP; }
  MMA_HD static int col(int tid) { return (tid % Tile::CHUNKS) * 8; }
};

// Output tile order: GROUP_M tile rows are walked column by column, so that CTAs running together share
// A and B panels in L2 (the ordering of Triton's matmul tutorial).
MMA_HD void tile_of_block(int pid, int tiles_m, int tiles_n, int group_m, int& tm, int& tn) {
  const int per_group = group_m * tiles_n;
  const int first_m = (pid / per_group) * group_m;
  const int rows = (tiles_m - first_m) < group_m ? (tiles_m - first_m) : group_m;
  tm = first_m + (pid % per_group) % rows;
  tn = (pid % per_group) / rows;
}

// Bytes of a 16-byte chunk that lie inside a row of `extent` elements starting at element `start`:
// cp.async copies that many and zero-fills the rest (the edges in M, N and K).
MMA_HD int chunk_bytes(int start, int extent) {
  const int left = extent - start;
  return left <= 0 ? 0 : (left >= 8 ? 16 : 2 * left);
}

// A CTA configuration: BM x BN output tile, BK deep k-tiles, warps of WM x WN, STAGES k-tiles in flight.
template <class T_, int BM_, int BN_, int BK_, int WM_, int WN_, int STAGES_, bool A_KMAJOR_, bool B_KMAJOR_>
struct TileConfig {
  using T = T_;
  static constexpr int BM = BM_, BN = BN_, BK = BK_, WM = WM_, WN = WN_, STAGES = STAGES_;
  static constexpr int WARPS_M = BM / WM, WARPS_N = BN / WN, THREADS = 32 * WARPS_M * WARPS_N;
  static constexpr int MI = WM / 16, NI = WN / 8;  // mma blocks per warp: m16 x n8 each
  using ATile = OperandTile<BM, BK, A_KMAJOR_>;
  using BTile = OperandTile<BN, BK, B_KMAJOR_>;
  static constexpr int STAGE_BYTES = 2 * (ATile::ELEMS + BTile::ELEMS);
  static constexpr int SMEM_BYTES = STAGES * STAGE_BYTES;
  static_assert(BM % WM == 0 && BN % WN == 0, "warps tile the CTA tile");
  static_assert(WM % 16 == 0 && WN % 16 == 0 && BK % 16 == 0, "whole m16 / n16 / k16 blocks");
  static_assert(STAGES >= 2, "a pipeline needs two stages");
  // Warps are numbered down the M direction first; warp w computes the WM x WN block at (wm, wn).
  MMA_HD static void warp_origin(int warp, int& wm, int& wn) {
    wm = (warp % WARPS_M) * WM;
    wn = (warp / WARPS_M) * WN;
  }
};

#if defined(__CUDACC__)
__device__ __forceinline__ void cp_async_16(u32 dst, const void* src, int src_bytes);
#endif

// Copies tiles of a strided operand (GEMM A or B, the convolution's weights) into its OperandTile.
// Element (d, k) of the operand is base[d * ld + k] when K-major, base[k * ld + d] when D-major; d runs
// over [0, d_extent), k over [0, k_extent). Requirements (checked by the Python wrappers): base 16-byte
// aligned and ld a multiple of 8 elements, so every chunk start is 16-byte aligned. The per-thread
// source pointers are computed once; a k-tile only advances them. Host-compilable except issue(), so
// the tests run source() itself.
template <class Tile, int THREADS>
struct MatrixLoader {
  using Plan = CopyPlan<Tile, THREADS>;
  const u16* base;
  const u16* src0[Plan::ITERS];  // this thread's chunks at k = 0
  i64 k_stride;                  // elements between k and k + 1: 1 (K-major) or ld (D-major)
  int tid, k_extent;
  int fixed_bytes;  // D-major: bytes of the thread's (fixed) d chunk inside d_extent
  unsigned row_ok;  // K-major: bit it set when the thread's row d of iteration it is inside d_extent

  MMA_HD MatrixLoader(const u16* base_, i64 ld, int d0, int d_extent, int k_extent_, int tid_)
      : base(base_), k_stride(Tile::K_MAJOR ? 1 : ld), tid(tid_), k_extent(k_extent_), fixed_bytes(0), row_ok(0) {
    const int col = Plan::col(tid);
#pragma unroll
    for (int it = 0; it < Plan::ITERS; ++it) {
      const int row = Plan::row(tid, it);
      if constexpr (Tile::K_MAJOR) {  // row = d, col = k
        const int d = d0 + row;
        row_ok |= (d < d_extent ? 1u : 0u) << it;
        src0[it] = base + (i64)(d < d_extent ? d : 0) * ld + col;
      } else {  // row = k, col = d
        src0[it] = base + (i64)row * ld + d0 + col;
      }
    }
    if constexpr (!Tile::K_MAJOR) fixed_bytes = chunk_bytes(d0 + col, d_extent);
  }

  // Source and byte count (0..16; the rest zero-filled) of this thread's chunk `it` of the k-tile at k0.
  // A chunk outside the operand reads nothing, from a valid address (the base).
  MMA_HD const u16* source(int it, int k0, int& bytes) const {
    if constexpr (Tile::K_MAJOR) {
      bytes = (row_ok >> it) & 1u ? chunk_bytes(k0 + Plan::col(tid), k_extent) : 0;
    } else {
      bytes = k0 + Plan::row(tid, it) < k_extent ? fixed_bytes : 0;
    }
    return bytes ? src0[it] + k0 * k_stride : base;
  }

#if defined(__CUDACC__)
  __device__ __forceinline__ void issue(u32 tile_smem, int k0) const {
#pragma unroll
    for (int it = 0; it < Plan::ITERS; ++it) {
      int bytes;
      const u16* src = source(it, k0, bytes);
      cp_async_16(tile_smem + 2 * Tile::offset(Plan::row(tid, it), Plan::col(tid)), src, bytes);
    }
  }
#endif
};

}  // namespace mma

// =====================================================================================================
// Device code
// =====================================================================================================
#if defined(__CUDACC__)
namespace mma {

__device__ __forceinline__ u32 smem_addr(const void* p) {
  u32 a;
  asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(a) : "l"(p));
  return a;
}

__device__ __forceinline__ unsigned char* dynamic_smem() {
  extern __shared__ __align__(128) unsigned char mma_dynamic_smem[];
  return mma_dynamic_smem;
}

// cp.async.cg (9.7.9.25): 16 bytes global -> shared, bypassing L1; only `src_bytes` (0..16) are read
// and the rest of the 16 are zero-filled. With src_bytes == 0 nothing is read, but `src` must still be
// a valid address, so callers pass the operand's base pointer there.
__device__ __forceinline__ void cp_async_16(u32 dst, const void* src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
// Wait until at most N of this thread's committed groups are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

template <bool TRANS>
__device__ __forceinline__ void ldmatrix_x4(u32 (&r)[4], u32 addr) {
  if constexpr (TRANS) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
  } else {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
  }
}

// d += a * b for one m16 n8 k16 block (9.7.14.5.8 fragments; a: 4 regs, b: 2 regs, d: 4 floats).
template <class T>
__device__ __forceinline__ void mma_16816(float (&d)[4], const u32 (&a)[4], u32 b0, u32 b1) {
  if constexpr (same_type<T, BF16>::value) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
                 "{%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
                 "{%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

// Round-to-nearest-even conversions (9.7.9.21). The packed form puts its FIRST source operand in the
// UPPER half, so (lo, hi) -> "cvt d, hi, lo" stores lo at the lower address.
template <class T>
__device__ __forceinline__ u32 pack2(float lo, float hi) {
  u32 r;
  if constexpr (same_type<T, BF16>::value) {
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  } else {
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  }
  return r;
}

// The CTA main loop: STAGES - 1 k-tiles are in flight while the warps multiply the oldest one.
// Loaders provide issue(tile_smem_address, k0), which starts the cp.async copies of one k-tile.
template <class Cfg, class ALoader, class BLoader>
__device__ __forceinline__ void mainloop(const ALoader& la, const BLoader& lb, int k_extent,
                                         float (&acc)[Cfg::MI][Cfg::NI][4]) {
  using ATile = typename Cfg::ATile;
  using BTile = typename Cfg::BTile;
  const int lane = threadIdx.x & 31;
  int wm, wn;
  Cfg::warp_origin(threadIdx.x >> 5, wm, wn);
  const u32 smem = smem_addr(dynamic_smem());
  const int k_tiles = (k_extent + Cfg::BK - 1) / Cfg::BK;

#pragma unroll
  for (int s = 0; s < Cfg::STAGES - 1; ++s) {
    if (s < k_tiles) {
      la.issue(smem + s * Cfg::STAGE_BYTES, s * Cfg::BK);
      lb.issue(smem + s * Cfg::STAGE_BYTES + 2 * ATile::ELEMS, s * Cfg::BK);
    }
    cp_async_commit();  // always commit, so that group counting stays uniform
  }

  for (int kt = 0; kt < k_tiles; ++kt) {
    // k-tile kt is group kt; STAGES - 1 + kt groups are committed, so allowing STAGES - 2 pending
    // means groups 0..kt are complete (for this thread; the barrier makes it so for all threads).
    cp_async_wait<Cfg::STAGES - 2>();
    __syncthreads();
    // Refill the stage consumed in iteration kt - 1: every warp has passed the barrier above, so none
    // still reads it.
    const int next = kt + Cfg::STAGES - 1;
    if (next < k_tiles) {
      const int s = next % Cfg::STAGES;
      la.issue(smem + s * Cfg::STAGE_BYTES, next * Cfg::BK);
      lb.issue(smem + s * Cfg::STAGE_BYTES + 2 * ATile::ELEMS, next * Cfg::BK);
    }
    cp_async_commit();

    const u32 a_tile = smem + (kt % Cfg::STAGES) * Cfg::STAGE_BYTES;
    const u32 b_tile = a_tile + 2 * ATile::ELEMS;
#pragma unroll
    for (int kk = 0; kk < Cfg::BK; kk += 16) {
      u32 af[Cfg::MI][4], bf[Cfg::NI / 2][4];
#pragma unroll
      for (int i = 0; i < Cfg::MI; ++i) {
        int row, col;
        ldsm_coords<ATile::K_MAJOR>(lane, wm + 16 * i, kk, row, col);
        ldmatrix_x4<!ATile::K_MAJOR>(af[i], a_tile + 2 * ATile::offset(row, col));
      }
#pragma unroll
      for (int j = 0; j < Cfg::NI / 2; ++j) {
        int row, col;
        ldsm_coords<BTile::K_MAJOR>(lane, wn + 16 * j, kk, row, col);
        ldmatrix_x4<!BTile::K_MAJOR>(bf[j], b_tile + 2 * BTile::offset(row, col));
      }
#pragma unroll
      for (int i = 0; i < Cfg::MI; ++i) {
#pragma unroll
        for (int j = 0; j < Cfg::NI; ++j) {
          int blk, r0, r1;
          b_frag_regs(j, blk, r0, r1);
          mma_16816<typename Cfg::T>(acc[i][j], af[i], bf[blk][r0], bf[blk][r1]);
        }
      }
    }
  }
  cp_async_wait<0>();  // no copy may outlive the CTA's shared memory
}

// Stores the fp32 accumulators, rounded to T, into row-major C at (m0, n0): rows below m_extent, and
// columns below ldc, which the wrapper allocates as a multiple of 8 (columns from N up to ldc are
// padding it discards). So every thread stores aligned pairs of neighbours, 4 bytes at a time, with one
// check per row and one per column block, and no element-wise edge path.
template <class Cfg>
__device__ __forceinline__ void store_tile(u16* c, int ldc, int m0, int n0, int m_extent,
                                           const float (&acc)[Cfg::MI][Cfg::NI][4]) {
  using T = typename Cfg::T;
  const int lane = threadIdx.x & 31;
  int wm, wn, r, cc;
  Cfg::warp_origin(threadIdx.x >> 5, wm, wn);
  acc_coords(lane, 0, r, cc);  // element 0 of each block; element 1 is the column after it
  const int row0 = m0 + wm + r, col0 = n0 + wn + cc;
#pragma unroll
  for (int i = 0; i < Cfg::MI; ++i) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {  // elements {0, 1} of a block share a row, {2, 3} the row 8 below
      const int row = row0 + 16 * i + 8 * h;
      if (row >= m_extent) continue;
      u16* out = c + (i64)row * ldc + col0;
#pragma unroll
      for (int j = 0; j < Cfg::NI; ++j) {
        if (col0 + 8 * j < ldc) {
          *reinterpret_cast<u32*>(out + 8 * j) = pack2<T>(acc[i][j][2 * h], acc[i][j][2 * h + 1]);
        }
      }
    }
  }
}

}  // namespace mma
#endif  // __CUDACC__
