// 2-D convolution, forward, by implicit GEMM over NHWC tensors on Tensor Cores (sm_80 and newer), with
// the GEMM's building blocks (mma_common.cuh): mma.sync.m16n8k16, ldmatrix, cp.async pipeline.
//
// The GEMM view: y[m, k] = sum_kd a[m, kd] * w[k, kd] with
//   m  = (n, p, q)    an output pixel, M = N * P * Q rows; y is [M, K] row-major = NHWC
//   kd = (r, s, c)    a filter tap and input channel, Kdim = R * S * C; w is [K, Kdim] = KRSC
//   a[m, kd] = x[n, p * stride_h - pad_h + r * dil_h, q * stride_w - pad_w + s * dil_w, c], zero outside
// so A is gathered on the fly ("im2col" without materialising it) and W is a K-major GEMM operand.
// y is stored with ldy >= K columns, a multiple of 8 (the padding columns are scratch).
// Requirements the wrapper (conv_cupy.py) checks: C a multiple of 8 (a 16-byte chunk of channels never
// straddles two filter taps, and every chunk is 16-byte aligned), x and w 16-byte aligned, groups == 1.
#include "mma_common.cuh"

namespace conv {

struct Geometry {
  int n, h, w, c, k, r, s, p, q;
  int stride_h, stride_w, pad_h, pad_w, dil_h, dil_w;
};

// Index math (host and device: tests/test_mma_layout.py compiles it with g++ and checks it).
// Output pixel m -> element offset of its image in x (-1 past M) and the input coordinates of tap (0, 0).
MMA_HD void pixel_origin(const Geometry& g, int m, mma::i64& image, int& h0, int& w0) {
  const int pq = g.p * g.q;
  const int img = m / pq, rest = m - img * pq, op = rest / g.q, oq = rest - op * g.q;
  image = m < g.n * pq ? (mma::i64)img * g.h * g.w * g.c : -1;
  h0 = op * g.stride_h - g.pad_h;
  w0 = oq * g.stride_w - g.pad_w;
}

// GEMM column kd = (r, s, c) -> the tap's offsets from (h0, w0) and the channel.
MMA_HD void tap_offsets(const Geometry& g, int kd, int& dh, int& dw, int& c) {
  c = kd % g.c;
  const int tap = kd / g.c;
  dh = (tap / g.s) * g.dil_h;
  dw = (tap % g.s) * g.dil_w;
}

// Element offset of x[image, ih, iw, c], or -1 where the tap falls into the padding.
MMA_HD mma::i64 input_offset(const Geometry& g, mma::i64 image, int ih, int iw, int c) {
  if (image < 0 || ih < 0 || ih >= g.h || iw < 0 || iw >= g.w) return -1;
  return image + ((mma::i64)ih * g.w + iw) * g.c + c;
}

// Copies A tiles (BM output pixels x BK of (r, s, c)) of the implicit GEMM into a K-major OperandTile.
// Each thread keeps one chunk column (8 channels of one tap) and Plan::ITERS output pixels; the pixels'
// coordinates are decoded once, the column's (r, s, c) once per k-tile. Host-compilable except issue(),
// so the tests run source() itself.
template <class Tile, int THREADS>
struct Im2colLoader {
  using Plan = mma::CopyPlan<Tile, THREADS>;
  static_assert(Tile::K_MAJOR, "the gathered operand is K-major: channels are contiguous in NHWC");
  const mma::u16* x;
  Geometry g;
  int tid, kdim;
  mma::i64 image[Plan::ITERS];  // element offset of the pixel's image, or -1 past M
  int h0[Plan::ITERS], w0[Plan::ITERS];  // input coordinates of tap (0, 0)

  MMA_HD Im2colLoader(const mma::u16* x_, const Geometry& g_, int m0, int tid_) : x(x_), g(g_), tid(tid_) {
    kdim = g.r * g.s * g.c;
#pragma unroll
    for (int it = 0; it < Plan::ITERS; ++it) pixel_origin(g, m0 + Plan::row(tid, it), image[it], h0[it], w0[it]);
  }

  // The thread's tap for the k-tile at k0: decoded once for all of its pixels.
  struct Tap {
    int dh, dw, c;
    bool ok;  // inside Kdim
  };
  MMA_HD Tap tap(int k0) const {
    Tap t;
    const int kd = k0 + Plan::col(tid);
    tap_offsets(g, kd, t.dh, t.dw, t.c);
    t.ok = kd < kdim;
    return t;
  }

  // Source and byte count of this thread's chunk `it`: 16, or 0 where the tap falls into the padding
  // or past Kdim (zero-fill, read from a valid address).
  MMA_HD const mma::u16* source(int it, const Tap& t, int& bytes) const {
    const mma::i64 off = t.ok ? input_offset(g, image[it], h0[it] + t.dh, w0[it] + t.dw, t.c) : -1;
    bytes = off >= 0 ? 16 : 0;
    return off >= 0 ? x + off : x;
  }

#if defined(__CUDACC__)
  __device__ __forceinline__ void issue(mma::u32 tile_smem, int k0) const {
    const Tap t = tap(k0);
#pragma unroll
    for (int it = 0; it < Plan::ITERS; ++it) {
      int bytes;
      const mma::u16* src = source(it, t, bytes);
      mma::cp_async_16(tile_smem + 2 * Tile::offset(Plan::row(tid, it), Plan::col(tid)), src, bytes);
    }
  }
#endif
};

}  // namespace conv

#if defined(__CUDACC__)
// minBlocksPerSM = 1 lets ptxas use up to 255 registers: left to itself it capped the 128x64 tile at
// 128 registers and spilled (sm_80).
template <class T, int BM, int BN, int BK, int WM, int WN, int STAGES>
__global__ void __launch_bounds__(32 * (BM / WM) * (BN / WN), 1)
conv2d_fwd_nhwc(const mma::u16* __restrict__ x, const mma::u16* __restrict__ w, mma::u16* __restrict__ y,
                int n, int h, int wd, int c, int k, int r, int s, int p, int q, int stride_h, int stride_w,
                int pad_h, int pad_w, int dil_h, int dil_w, int ldy, int group_m) {
  // Both operands K-major: x's channels and w's (r, s, c) are contiguous.
  using Cfg = mma::TileConfig<T, BM, BN, BK, WM, WN, STAGES, true, true>;
  const conv::Geometry g{n, h, wd, c, k, r, s, p, q, stride_h, stride_w, pad_h, pad_w, dil_h, dil_w};
  const int m_extent = n * p * q, kdim = r * s * c;
  int tm, tn;
  mma::tile_of_block(blockIdx.x, (m_extent + BM - 1) / BM, (k + BN - 1) / BN, group_m, tm, tn);

  const conv::Im2colLoader<typename Cfg::ATile, Cfg::THREADS> la(x, g, tm * BM, threadIdx.x);
  const mma::MatrixLoader<typename Cfg::BTile, Cfg::THREADS> lb(w, kdim, tn * BN, k, kdim, threadIdx.x);
  float acc[Cfg::MI][Cfg::NI][4];
#pragma unroll
  for (int i = 0; i < Cfg::MI; ++i)
#pragma unroll
    for (int j = 0; j < Cfg::NI; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;

  mma::mainloop<Cfg>(la, lb, kdim, acc);
  mma::store_tile<Cfg>(y, ldy, tm * BM, tn * BN, m_extent, acc);
}
#endif  // __CUDACC__
