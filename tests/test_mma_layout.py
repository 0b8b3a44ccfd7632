"""The Tensor Core kernels' index math, checked on the CPU against the PTX ISA.

No GPU ran these kernels here. What can be checked without one is checked: the index functions the
kernels call (kernels/mma_common.cuh, the host part of kernels/conv_implicit.cu) are compiled with g++
(tests/mma_probe.cpp) and drive a numpy model of the hardware built from the PTX ISA's own tables:

- ldmatrix (PTX ISA 9.7.14.5.15): thread 8i + r supplies row r of 8x8 matrix i; thread t receives row
  t // 4, elements 2 (t % 4) and +1 of each matrix (of its transpose with .trans);
- mma.m16n8k16 fragments (9.7.14.5.8): the A, B and C/D element <-> (thread, register) tables;
- cp.async with a source size (9.7.9.25): the bytes past the source size are zero-filled.

The model replays each kernel's CTA schedule (copy plan, swizzled shared-memory tiles, ldmatrix
addresses, fragment registers, epilogue) on integer-valued operands and must reproduce A @ B (and the
convolution) exactly, edges in M, N, K included. What this cannot see: the cp.async pipeline's
synchronisation (wait_group counts, barriers), instruction encodings, and anything about timing.
"""

from __future__ import annotations

import ctypes
import math
import shutil
import subprocess

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from microbench.kernels import conv_cupy, gemm_cupy

from .conftest import REPO

KERNELS = REPO / "kernels"
GROUP_M = gemm_cupy.GROUP_M

# (probe index, Tile, A K-major, B K-major, kind): every configuration the wrappers instantiate
CONFIGS = [(t, a_k, b_k, "gemm") for t in gemm_cupy.gemm_tiles() for a_k, b_k in gemm_cupy.LAYOUTS] + [
    (t, True, True, "conv") for t in conv_cupy.conv_tiles()
]
INFO_FIELDS = (
    "threads",
    "mi",
    "ni",
    "warps_m",
    "warps_n",
    "smem_bytes",
    "stage_bytes",
    "a_rows",
    "a_cols",
    "b_rows",
    "b_cols",
    "a_iters",
    "b_iters",
    "a_elems",
    "b_elems",
)


class Probe:
    def __init__(self, lib: ctypes.CDLL):
        self.lib = lib

    def _ints(self, fn, *args, n=2):
        outs = [ctypes.c_int() for _ in range(n)]
        getattr(self.lib, fn)(*args, *[ctypes.byref(o) for o in outs])
        return tuple(o.value for o in outs)

    def swizzle(self, row_chunks, row, chunk):
        return self.lib.probe_swizzle(row_chunks, row, chunk)

    def ldsm(self, kmajor, lane, d0, k0):
        return self._ints("probe_ldsm", int(kmajor), lane, d0, k0)

    def acc(self, lane, e):
        return self._ints("probe_acc", lane, e)

    def bregs(self, j):
        return self._ints("probe_bregs", j, n=3)

    def tile_of_block(self, pid, tiles_m, tiles_n, group_m):
        return self._ints("probe_tile_of_block", pid, tiles_m, tiles_n, group_m)

    def chunk_bytes(self, start, extent):
        return self.lib.probe_chunk_bytes(start, extent)

    def info(self, q) -> dict:
        out = (ctypes.c_int * 32)()
        assert self.lib.probe_config(q, 0, 0, 0, out, None, None) == 0
        return dict(zip(INFO_FIELDS, out))

    def copy_plan(self, q, operand, threads, iters):
        n = threads * iters
        rows, cols, offs = (ctypes.c_int * n)(), (ctypes.c_int * n)(), (ctypes.c_int * n)()
        self.lib.probe_config(q, 1 if operand == "a" else 2, 0, 0, rows, cols, offs)
        shape = (threads, iters)
        return tuple(np.array(v).reshape(shape).tolist() for v in (rows, cols, offs))

    def offset(self, q, operand, row, col):
        out = ctypes.c_int()
        self.lib.probe_config(q, 3 if operand == "a" else 4, row, col, ctypes.byref(out), None, None)
        return out.value

    def warp_origin(self, q, warp):
        a, b = ctypes.c_int(), ctypes.c_int()
        self.lib.probe_config(q, 5, warp, 0, ctypes.byref(a), ctypes.byref(b), None)
        return a.value, b.value

    def matrix_source(self, q, operand, tid, it, ld, d0, d_extent, k0, k_extent, wgmma=False):
        """(element offset from the operand's base, bytes) that MatrixLoader::source gives the copy."""
        b = ctypes.c_int()
        fn = self.lib.probe_wgmma_matrix_source if wgmma else self.lib.probe_matrix_source
        off = fn(
            q, 0 if operand == "a" else 1, tid, it, ctypes.c_longlong(ld), d0, d_extent, k0, k_extent, ctypes.byref(b)
        )
        return off, b.value

    def im2col_source(self, q, g, m0, tid, it, k0):
        b = ctypes.c_int()
        off = self.lib.probe_im2col_source(q, g, m0, tid, it, k0, ctypes.byref(b))
        return off, b.value

    def wgmma_info(self, q) -> dict:
        out = (ctypes.c_int * 16)()
        assert self.lib.probe_wgmma(q, 0, out, None, None) == 0
        return dict(
            zip(("threads", "nb", "stage_bytes", "smem_bytes", "a_elems", "b_elems", "a_iters", "b_iters"), out)
        )

    def wgmma_copy_plan(self, q, operand, threads, iters):
        n = threads * iters
        rows, cols, offs = (ctypes.c_int * n)(), (ctypes.c_int * n)(), (ctypes.c_int * n)()
        self.lib.probe_wgmma(q, 1 if operand == "a" else 2, rows, cols, offs)
        return tuple(np.array(v).reshape(threads, iters).tolist() for v in (rows, cols, offs))

    def wgmma_desc(self, addr):
        return self.lib.probe_wgmma_desc(addr)

    def wgmma_acc(self, t, i):
        return self._ints("probe_wgmma_acc", t, i)

    def pixel_origin(self, g, m):
        image, h0, w0 = ctypes.c_longlong(), ctypes.c_int(), ctypes.c_int()
        self.lib.probe_pixel_origin(g, m, ctypes.byref(image), ctypes.byref(h0), ctypes.byref(w0))
        return image.value, h0.value, w0.value

    def tap_offsets(self, g, kd):
        return self._ints("probe_tap_offsets", g, kd, n=3)

    def input_offset(self, g, image, ih, iw, c):
        return self.lib.probe_input_offset(g, ctypes.c_longlong(image), ih, iw, c)


@pytest.fixture(scope="session")
def probe(tmp_path_factory) -> Probe:
    gxx = shutil.which("g++") or shutil.which("c++")
    if not gxx:
        pytest.skip("no host C++ compiler (g++) to build the index-math probe")
    d = tmp_path_factory.mktemp("probe")
    lines = [
        f"PROBE_CONFIG({q}, {t.bm}, {t.bn}, {t.bk}, {t.wm}, {t.wn}, {t.stages}, {str(a).lower()}, {str(b).lower()})"
        for q, (t, a, b, _) in enumerate(CONFIGS)
    ]
    (d / "probe_configs.inc").write_text("\n".join(lines) + "\n")
    (d / "probe_wgmma.inc").write_text(
        "".join(f"PROBE_WGMMA({q}, {t.bm}, {t.bn}, {t.stages})\n" for q, t in enumerate(gemm_cupy.wgmma_tiles()))
    )
    so = d / "probe.so"
    proc = subprocess.run(
        [
            gxx,
            "-std=c++17",
            "-O1",
            "-shared",
            "-fPIC",
            f"-I{KERNELS}",
            f"-I{d}",
            str(REPO / "tests" / "mma_probe.cpp"),
            "-o",
            str(so),
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    lib = ctypes.CDLL(str(so))
    lib.probe_input_offset.restype = ctypes.c_longlong
    lib.probe_wgmma_desc.restype = ctypes.c_ulonglong
    for fn in (lib.probe_matrix_source, lib.probe_wgmma_matrix_source, lib.probe_im2col_source):
        fn.restype = ctypes.c_longlong
    lib.probe_wgmma_desc.argtypes = [ctypes.c_uint]
    return Probe(lib)


# ---------------------------------------------------------------------------------------------------
# The hardware model, from the PTX ISA tables (independent of the kernels' code)
# ---------------------------------------------------------------------------------------------------
LANES = np.arange(32)
GROUP, TIG = LANES >> 2, LANES & 3  # groupID, threadID_in_group


def ldmatrix_x4(smem: np.ndarray, addrs: np.ndarray, trans: bool) -> np.ndarray:
    """regs[lane, i, 0:2]: the two 16-bit elements of register i of each lane (9.7.14.5.15)."""
    assert all(a % 8 == 0 for a in addrs), "ldmatrix rows must be 16-byte aligned"
    rows = smem[addrs[:, None] + np.arange(8)]  # row supplied by each lane
    mats = rows.reshape(4, 8, 8)  # matrix i = lanes 8i .. 8i+7
    if trans:
        mats = mats.transpose(0, 2, 1)
    return np.stack([mats[i][GROUP[:, None], 2 * TIG[:, None] + np.arange(2)] for i in range(4)], axis=1)


def _a_map():
    """(lane, a_i) -> (row, col) of the 16x16 A block, 9.7.14.5.8, for .f16 / .bf16."""
    rows = np.zeros((32, 8), int)
    cols = np.zeros((32, 8), int)
    for i in range(8):
        rows[:, i] = np.where((i < 2) | ((4 <= i) & (i < 6)), GROUP, GROUP + 8)
        cols[:, i] = TIG * 2 + (i & 1) + (8 if i >= 4 else 0)
    return rows, cols


def _b_map():
    """(lane, b_i) -> (row k, col n) of the 16x8 B block."""
    rows = np.zeros((32, 4), int)
    cols = np.zeros((32, 4), int)
    for i in range(4):
        rows[:, i] = TIG * 2 + (i & 1) + (8 if i >= 2 else 0)
        cols[:, i] = GROUP
    return rows, cols


def _c_map():
    """(lane, c_i) -> (row, col) of the 16x8 accumulator block (.f32)."""
    rows = np.zeros((32, 4), int)
    cols = np.zeros((32, 4), int)
    for i in range(4):
        rows[:, i] = GROUP + (8 if i >= 2 else 0)
        cols[:, i] = TIG * 2 + (i & 1)
    return rows, cols


A_MAP, B_MAP, C_MAP = _a_map(), _b_map(), _c_map()


def mma_m16n8k16(a_regs: np.ndarray, b_regs: np.ndarray) -> np.ndarray:
    """a_regs [32, 4, 2] (a0..a7 low to high), b_regs [32, 2, 2] -> D fragment [32, 4] of A @ B."""
    a = np.full((16, 16), np.nan)
    a[A_MAP[0], A_MAP[1]] = a_regs.reshape(32, 8)
    b = np.full((16, 8), np.nan)
    b[B_MAP[0], B_MAP[1]] = b_regs.reshape(32, 4)
    assert not np.isnan(a).any() and not np.isnan(b).any(), "a fragment element was never loaded"
    return (a @ b)[C_MAP[0], C_MAP[1]]


# ---------------------------------------------------------------------------------------------------
# Replaying a kernel's CTA schedule
# ---------------------------------------------------------------------------------------------------
def _fill(probe, q, operand, info, chunk_source) -> np.ndarray:
    """One k-tile of an operand in shared memory, copied chunk by chunk as the copy plan says;
    chunk_source(tid, it) gives the 8 elements (zero-filled) the kernel's loader copies there."""
    iters = info[f"{operand}_iters"]
    rows, cols, offs = probe.copy_plan(q, operand, info["threads"], iters)
    smem = np.full(info[f"{operand}_elems"], np.nan)
    for tid in range(info["threads"]):
        for it in range(iters):
            o = offs[tid][it]
            assert o % 8 == 0 and np.isnan(smem[o : o + 8]).all(), "a chunk written twice (or misaligned)"
            smem[o : o + 8] = chunk_source(tid, it)
    assert not np.isnan(smem).any(), "the copy plan left part of the tile unwritten"
    return smem


def _copy(memory: np.ndarray, source: tuple[int, int]) -> np.ndarray:
    """cp.async with a source size: `bytes` from memory at the element offset, the rest of 16 zero."""
    off, nbytes = source
    assert nbytes in (0, 2, 4, 6, 8, 10, 12, 14, 16)
    out = np.zeros(8)
    if nbytes:
        assert off % 8 == 0, "a 16-byte aligned source"
        out[: nbytes // 2] = memory[off : off + nbytes // 2]
    assert not np.isnan(out).any(), "the loader read past the operand (into the NaN padding)"
    return out


def _stored(op: np.ndarray, kmajor: bool) -> tuple[np.ndarray, int]:
    """A (d, k) operand laid out in memory as the kernel is told: rows of k (K-major) or of d, with a
    leading dimension padded past the extent (a multiple of 8) and NaN in the padding."""
    rows = op if kmajor else op.T
    ld = -(-rows.shape[1] // 8) * 8 + 8
    mem = np.full((rows.shape[0], ld), np.nan)
    mem[:, : rows.shape[1]] = rows
    return mem.reshape(-1), ld


def _matrix_loader(probe, q, operand, op: np.ndarray, kmajor: bool, wgmma=False):
    """chunk(d0, k0, tid, it): what the kernel's MatrixLoader copies, through its own source()."""
    mem, ld = _stored(op, kmajor)
    d_ext, k_ext = op.shape
    return lambda d0, k0, tid, it: _copy(mem, probe.matrix_source(q, operand, tid, it, ld, d0, d_ext, k0, k_ext, wgmma))


def replay(probe, q, tile, a_kmajor, b_kmajor, m, n, k, a_chunk, b_chunk) -> np.ndarray:
    """C (m x ldc) as the kernel computes it; a_chunk(m0, k0, tid, it) / b_chunk(n0, k0, tid, it) are
    the loaders."""
    info = probe.info(q)
    assert info["smem_bytes"] == tile.smem_bytes and info["threads"] == tile.threads
    tiles_m, tiles_n = math.ceil(m / tile.bm), math.ceil(n / tile.bn)
    ldc = -(-n // 8) * 8
    c = np.full((m, ldc), np.nan)
    warps = info["threads"] // 32
    for pid in range(tiles_m * tiles_n):
        tm, tn = probe.tile_of_block(pid, tiles_m, tiles_n, GROUP_M)
        acc = np.zeros((warps, 32, info["mi"], info["ni"], 4))
        for k0 in range(0, k, tile.bk):
            sa = _fill(probe, q, "a", info, lambda tid, it: a_chunk(tm * tile.bm, k0, tid, it))
            sb = _fill(probe, q, "b", info, lambda tid, it: b_chunk(tn * tile.bn, k0, tid, it))
            for warp in range(warps):
                wm, wn = probe.warp_origin(q, warp)
                for kk in range(0, tile.bk, 16):
                    af = [
                        ldmatrix_x4(
                            sa,
                            np.array(
                                [probe.offset(q, "a", *probe.ldsm(a_kmajor, ln, wm + 16 * i, kk)) for ln in range(32)]
                            ),
                            trans=not a_kmajor,
                        )
                        for i in range(info["mi"])
                    ]
                    bf = [
                        ldmatrix_x4(
                            sb,
                            np.array(
                                [probe.offset(q, "b", *probe.ldsm(b_kmajor, ln, wn + 16 * j, kk)) for ln in range(32)]
                            ),
                            trans=not b_kmajor,
                        )
                        for j in range(info["ni"] // 2)
                    ]
                    for i in range(info["mi"]):
                        for j in range(info["ni"]):
                            blk, r0, r1 = probe.bregs(j)
                            acc[warp, :, i, j] += mma_m16n8k16(af[i], bf[blk][:, [r0, r1]])
        # store_tile: element 0's coordinates, element 1 beside it, elements 2 and 3 eight rows below
        for warp in range(warps):
            wm, wn = probe.warp_origin(q, warp)
            for ln in range(32):
                r, cc = probe.acc(ln, 0)
                row0, col0 = tm * tile.bm + wm + r, tn * tile.bn + wn + cc
                for i in range(info["mi"]):
                    for h in range(2):
                        row = row0 + 16 * i + 8 * h
                        if row >= m:
                            continue
                        for j in range(info["ni"]):
                            col = col0 + 8 * j
                            if col < ldc:
                                c[row, col : col + 2] = acc[warp, ln, i, j, 2 * h : 2 * h + 2]
    return c


def _ints(shape, rng):
    return rng.integers(-3, 4, size=shape).astype(np.float64)  # exact sums in fp32 and float64 alike


# ---------------------------------------------------------------------------------------------------
# Tests
# ---------------------------------------------------------------------------------------------------
def test_fragment_maps_cover_each_element_once():
    for rows, cols, shape in ((*A_MAP, (16, 16)), (*B_MAP, (16, 8)), (*C_MAP, (16, 8))):
        seen = np.zeros(shape, int)
        np.add.at(seen, (rows, cols), 1)
        assert (seen == 1).all()


def test_acc_coords_and_b_registers_follow_the_isa(probe):
    for lane in range(32):
        for e in range(4):
            assert probe.acc(lane, e) == (C_MAP[0][lane, e], C_MAP[1][lane, e])
    # ldsm_coords orders the x4 matrices (d0-7,k0-7), (d8-15,k0-7), (d0-7,k8-15), (d8-15,k8-15): the
    # n8 block j of a 16-wide load is registers {0, 2} (j even) or {1, 3} (j odd) of load j // 2
    assert [probe.bregs(j) for j in range(4)] == [(0, 0, 2), (0, 1, 3), (1, 0, 2), (1, 1, 3)]


@pytest.mark.parametrize("kmajor", [True, False])
def test_ldmatrix_addresses_give_mma_fragments(probe, kmajor):
    """A 16x16 block stored either way, loaded with the kernel's addresses: registers {0..3} must be
    the A fragment and {0,2} / {1,3} the B fragments of its two n8 halves, by the ISA tables."""
    rng = np.random.default_rng(1)
    block = rng.permutation(256).reshape(16, 16).astype(float)  # block[d, k], distinct values
    for cols in (16, 32, 64):  # tile widths with 2, 4, 8 chunks per row
        stored = block if kmajor else block.T  # K-major: rows are d; D-major: rows are k
        rows_n = stored.shape[0]
        tile = np.zeros((rows_n, cols))
        tile[:, :16] = stored
        smem = np.zeros(rows_n * cols)
        for r in range(rows_n):
            for ch in range(cols // 8):
                p = probe.swizzle(cols // 8, r, ch)
                smem[r * cols + 8 * p : r * cols + 8 * p + 8] = tile[r, 8 * ch : 8 * ch + 8]
        addrs = []
        for ln in range(32):
            r, c = probe.ldsm(kmajor, ln, 0, 0)
            addrs.append(r * cols + 8 * probe.swizzle(cols // 8, r, c // 8) + c % 8)
        regs = ldmatrix_x4(smem, np.array(addrs), trans=not kmajor)
        a = np.full((16, 16), np.nan)
        a[A_MAP[0], A_MAP[1]] = regs.reshape(32, 8)
        np.testing.assert_array_equal(a, block)  # as A (rows m = d, cols k)
        for half in range(2):
            b = np.full((16, 8), np.nan)
            b[B_MAP[0], B_MAP[1]] = regs[:, [half, half + 2]].reshape(32, 4)
            np.testing.assert_array_equal(b, block[8 * half : 8 * half + 8].T)  # as B (rows k, cols n = d)


@pytest.mark.parametrize("row_chunks", [2, 4, 8, 16, 32])
def test_swizzle_is_a_bijection_and_ldmatrix_is_conflict_free(probe, row_chunks):
    for row in range(64):
        assert sorted(probe.swizzle(row_chunks, row, c) for c in range(row_chunks)) == list(range(row_chunks))
    # every 8-lane phase of an ldmatrix reads 8 chunks at the same logical column from 8 consecutive
    # rows (K-major) or 8 consecutive k-rows (D-major): they must land in 8 distinct 16-byte bank groups
    cols = 8 * row_chunks
    for kmajor in (True, False):
        for d0 in range(0, 32 if kmajor else max(16, cols), 16):
            if not kmajor and d0 + 16 > cols:
                continue
            for k0 in (0, 16):
                if kmajor and k0 + 16 > cols:
                    continue
                units = []
                for ln in range(32):
                    r, c = probe.ldsm(kmajor, ln, d0, k0)
                    units.append((r * row_chunks + probe.swizzle(row_chunks, r, c // 8)) % 8)
                for phase in range(4):
                    assert len(set(units[8 * phase : 8 * phase + 8])) == 8


def test_tile_order_visits_every_tile_once(probe):
    for tiles_m, tiles_n in ((1, 1), (3, 5), (17, 4), (8, 8), (9, 31)):
        seen = {probe.tile_of_block(pid, tiles_m, tiles_n, GROUP_M) for pid in range(tiles_m * tiles_n)}
        assert seen == {(i, j) for i in range(tiles_m) for j in range(tiles_n)}


def test_chunk_bytes_zero_fills_the_edges(probe):
    assert [probe.chunk_bytes(s, 20) for s in (0, 8, 16, 19, 20, 27)] == [16, 16, 8, 2, 0, 0]


@pytest.mark.parametrize(
    "q",
    [i for i, c in enumerate(CONFIGS) if c[3] == "gemm"],
    ids=[f"{c[0].label} {gemm_cupy._layout_label(c[1], c[2])}" for c in CONFIGS if c[3] == "gemm"],
)
def test_gemm_schedule_reproduces_matmul(probe, q):
    tile, a_k, b_k, _ = CONFIGS[q]
    # two tile rows and columns, both partial; three k-tiles, the last partial; N not a multiple of 8
    m, n, k = tile.bm + 19, tile.bn + 9, 2 * tile.bk + 10
    rng = np.random.default_rng(q)
    a, b = _ints((m, k), rng), _ints((k, n), rng)
    bt = b.T.copy()  # B as a (d = n, k) matrix
    c = replay(
        probe, q, tile, a_k, b_k, m, n, k, _matrix_loader(probe, q, "a", a, a_k), _matrix_loader(probe, q, "b", bt, b_k)
    )
    np.testing.assert_array_equal(c[:, :n], a @ b)


@pytest.mark.parametrize(
    "q", [i for i, c in enumerate(CONFIGS) if c[3] == "conv"], ids=[c[0].label for c in CONFIGS if c[3] == "conv"]
)
def test_conv_schedule_reproduces_conv2d(probe, q):
    tile = CONFIGS[q][0]
    # 3x3, stride 2, padding 1, dilation (1, 2): taps fall into the padding on every side; M = 2*5*4
    # output pixels span partial tiles; K = 24 channels out (3 chunks), C = 16 in.
    n, c, h, w, kk, r, s = 2, 16, 9, 10, 24, 3, 3
    stride, pad, dil = (2, 2), (1, 1), (1, 2)
    x = torch.from_numpy(_ints((n, c, h, w), np.random.default_rng(10 + q)))
    wt = torch.from_numpy(_ints((kk, c, r, s), np.random.default_rng(20 + q)))
    ref = F.conv2d(x, wt, stride=stride, padding=pad, dilation=dil)  # float64, exact on small integers
    p, qq = ref.shape[2:]
    geom = (ctypes.c_int * 15)(n, h, w, c, kk, r, s, p, qq, *stride, *pad, *dil)
    x_flat = x.permute(0, 2, 3, 1).reshape(-1).numpy()  # NHWC, contiguous as the wrapper passes it
    w_mat = wt.permute(0, 2, 3, 1).reshape(kk, -1).numpy()  # KRSC: (d = k, kd)
    kdim = r * s * c

    def a_chunk(m0, k0, tid, it):  # the kernel's Im2colLoader::source
        return _copy(x_flat, probe.im2col_source(q, geom, m0, tid, it, k0))

    out = replay(probe, q, tile, True, True, n * p * qq, kk, kdim, a_chunk, _matrix_loader(probe, q, "b", w_mat, True))
    np.testing.assert_array_equal(out[:, :kk], ref.permute(0, 2, 3, 1).reshape(-1, kk).numpy())


# ---------------------------------------------------------------------------------------------------
# The wgmma variant (gemm_wgmma.cu): UNVERIFIED ON HARDWARE; this is the strongest check it has
# ---------------------------------------------------------------------------------------------------
def wgmma_read(smem: np.ndarray, desc: int, rows: int) -> np.ndarray:
    """rows x k16 of a K-major operand as wgmma reads it through a matrix descriptor (PTX ISA
    9.7.15.5.1.2): fields decoded per the descriptor table; canonical K-major 128-byte-swizzle layout,
    element (r, k) at start + (r // 8) * SBO + (r % 8) * 128 + 2 k before the swizzle, which XORs address
    bits [4:6] with bits [7:9] (the 16-byte chunk with the row within the 1024-byte pattern)."""
    start = (desc & 0x3FFF) << 4
    sbo = ((desc >> 32) & 0x3FFF) << 4
    assert (desc >> 62) == 1, "expected the 128-byte swizzle mode"
    assert (desc >> 49) & 7 == 0, "base offset"
    r = np.arange(rows)[:, None]
    kk = np.arange(16)[None, :]
    logical = start + (r // 8) * sbo + (r % 8) * 128 + 2 * kk
    physical = logical ^ (((logical >> 7) & 7) << 4)
    return smem[physical // 2]


def wgmma_d_layout(n: int) -> tuple[np.ndarray, np.ndarray]:
    """(thread, register) -> (m, n) of the m64nNk16 f32 accumulator, written as CUTLASS/CuTe's layout
    algebra states it, ((4,8,4),(2,2,N/8)) : ((128,1,16),(64,8,512)) over the column-major (M64, N) index:
    a second, independent statement of the ISA's accumulator figure."""
    t = np.arange(128)[:, None]
    v = np.arange(n // 2)[None, :]
    idx = (t % 4) * 128 + ((t // 4) % 8) * 1 + (t // 32) * 16 + (v % 2) * 64 + ((v // 2) % 2) * 8 + (v // 4) * 512
    return idx % 64, idx // 64


def test_wgmma_descriptor_fields(probe):
    for addr in (0, 1024, 0x1400 + 32, 0x3FFF0):
        d = probe.wgmma_desc(addr)
        assert d & 0x3FFF == (addr & 0x3FFFF) >> 4
        assert (d >> 16) & 0x3FFF == 1  # leading byte offset: unused by swizzled K-major, "assumed 1"
        assert (d >> 32) & 0x3FFF == 1024 >> 4  # 8 rows of 128 bytes to the next 8 rows
        assert (d >> 49) & 7 == 0 and d >> 62 == 1
        assert d & ~((0x3FFF) | (0x3FFF << 16) | (0x3FFF << 32) | (3 << 62)) == 0  # nothing else set


def test_wgmma_acc_coords_match_the_layout_algebra(probe):
    m_, n_ = wgmma_d_layout(128)
    for t in range(128):
        for i in range(64):
            assert probe.wgmma_acc(t, i) == (m_[t, i], n_[t, i])
    seen = np.zeros((64, 128), int)
    np.add.at(seen, (m_, n_), 1)
    assert (seen == 1).all()


@pytest.mark.parametrize("q", range(len(gemm_cupy.wgmma_tiles())))
def test_wgmma_schedule_reproduces_matmul(probe, q):
    """cp.async fills (the loaders and tiles of the mma.sync kernels) read back through descriptors as
    the wgmma kernel builds them, multiplied, scattered into the accumulator layout and stored by the
    kernel's epilogue: A @ B exactly, edges included."""
    tile = gemm_cupy.wgmma_tiles()[q]
    info = probe.wgmma_info(q)
    assert info["smem_bytes"] == tile.smem_bytes and info["threads"] == tile.threads
    m, n, k = tile.bm + 19, tile.bn + 9, 2 * tile.bk + 10
    rng = np.random.default_rng(7)
    a, b = _ints((m, k), rng), _ints((k, n), rng)
    bt = b.T.copy()
    raw_base = 0x1230  # an unaligned dynamic shared memory base: the kernel aligns it up to 1024 bytes
    base = (raw_base + 1023) & ~1023
    smem = np.zeros((raw_base + tile.smem_bytes) // 2)
    tiles_m, tiles_n = math.ceil(m / tile.bm), math.ceil(n / tile.bn)
    ldc = -(-n // 8) * 8
    c = np.full((m, ldc), np.nan)
    plans = {op: probe.wgmma_copy_plan(q, op, info["threads"], info[f"{op}_iters"]) for op in ("a", "b")}
    loaders = {
        "a": _matrix_loader(probe, q, "a", a, True, wgmma=True),
        "b": _matrix_loader(probe, q, "b", bt, True, wgmma=True),
    }
    m_map, n_map = wgmma_d_layout(128)
    for pid in range(tiles_m * tiles_n):
        tm, tn = probe.tile_of_block(pid, tiles_m, tiles_n, GROUP_M)
        acc = np.zeros((tile.bm // 64, info["nb"], 128, 64))  # [warpgroup, n128 block, thread, register]
        for kt, k0 in enumerate(range(0, k, tile.bk)):
            stage = base + (kt % tile.stages) * info["stage_bytes"]
            tiles = {"a": (stage, tm * tile.bm), "b": (stage + 2 * info["a_elems"], tn * tile.bn)}
            for op, (tile_addr, d0) in tiles.items():
                rows, cols, offs = plans[op]
                for tid in range(info["threads"]):
                    for it in range(len(rows[tid])):
                        e = tile_addr // 2 + offs[tid][it]
                        smem[e : e + 8] = loaders[op](d0, k0, tid, it)
            for w in range(tile.bm // 64):
                for kk in range(0, tile.bk, 16):
                    a_blk = wgmma_read(smem, probe.wgmma_desc(stage + w * 64 * 128 + 2 * kk), 64)
                    for h in range(info["nb"]):
                        b_blk = wgmma_read(
                            smem, probe.wgmma_desc(stage + 2 * info["a_elems"] + h * 128 * 128 + 2 * kk), 128
                        )
                        acc[w, h] += (a_blk @ b_blk.T)[m_map, n_map]
        for w in range(tile.bm // 64):
            for h in range(info["nb"]):
                for t in range(128):
                    for qq in range(32):
                        r, cc = probe.wgmma_acc(t, 2 * qq)
                        row, col = tm * tile.bm + w * 64 + r, tn * tile.bn + h * 128 + cc
                        if row < m and col < ldc:
                            c[row, col : col + 2] = acc[w, h, t, 2 * qq : 2 * qq + 2]
    np.testing.assert_array_equal(c[:, :n], a @ b)
