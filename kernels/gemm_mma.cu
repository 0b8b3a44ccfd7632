// Mixed-precision GEMM on Tensor Cores (sm_80 and newer): C = A @ B, fp16 or bf16 operands, fp32
// accumulation, C rounded to the operand type. mma.sync.m16n8k16 fed by ldmatrix from swizzled
// shared-memory tiles, filled by a STAGES-deep cp.async pipeline (building blocks: mma_common.cuh).
//
// Layouts: A is [M, K] and B is [K, N], each with one contiguous dimension; A_KMAJOR / B_KMAJOR say
// whether that is K (A row-major / B column-major) or M / N. Batched through blockIdx.z with element
// strides between batch entries (0 broadcasts). Any M, N, K >= 1: tiles at the edges are zero-filled by
// cp.async, and the epilogue stores rows below M and columns below ldc. Requirements the wrapper
// (gemm_cupy.py) meets: A, B 16-byte aligned, lda, ldb, batch strides multiples of 8 elements; C
// row-major with ldc a multiple of 8 >= N (columns N..ldc-1 are scratch) and batch stride M * ldc.
#include "mma_common.cuh"

// minBlocksPerSM = 1 lets ptxas use up to 255 registers: left to itself it capped conv_implicit.cu's
// 128x64 tile at 128 registers and spilled (sm_80).
template <class T, int BM, int BN, int BK, int WM, int WN, int STAGES, bool A_KMAJOR, bool B_KMAJOR>
__global__ void __launch_bounds__(32 * (BM / WM) * (BN / WN), 1)
gemm_mma(const mma::u16* __restrict__ a, const mma::u16* __restrict__ b, mma::u16* __restrict__ c,
         int m, int n, int k, mma::i64 lda, mma::i64 ldb, int ldc,
         mma::i64 batch_stride_a, mma::i64 batch_stride_b, int group_m) {
  using Cfg = mma::TileConfig<T, BM, BN, BK, WM, WN, STAGES, A_KMAJOR, B_KMAJOR>;
  int tm, tn;
  mma::tile_of_block(blockIdx.x, (m + BM - 1) / BM, (n + BN - 1) / BN, group_m, tm, tn);
  a += blockIdx.z * batch_stride_a;
  b += blockIdx.z * batch_stride_b;
  c += (mma::i64)blockIdx.z * m * ldc;

  // A is the D = M operand, B the D = N operand (mma's "col" B: k runs along each n).
  const mma::MatrixLoader<typename Cfg::ATile, Cfg::THREADS> la(a, lda, tm * BM, m, k, threadIdx.x);
  const mma::MatrixLoader<typename Cfg::BTile, Cfg::THREADS> lb(b, ldb, tn * BN, n, k, threadIdx.x);
  float acc[Cfg::MI][Cfg::NI][4];
#pragma unroll
  for (int i = 0; i < Cfg::MI; ++i)
#pragma unroll
    for (int j = 0; j < Cfg::NI; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;

  mma::mainloop<Cfg>(la, lb, k, acc);
  mma::store_tile<Cfg>(c, ldc, tm * BM, tn * BN, m, acc);
}
