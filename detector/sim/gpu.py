"""Per-GPU physics of one tick: workload phase in, every DCGM field value out, as (nodes, gpus)
arrays. Failures reach the model through ``GpuDrive`` (additive offsets, factors, counter
increments and flags written by failures.py before the model runs).

Levels follow a B200 in an HGX board under LLM training: ~930 W and ~98 % utilization while
training, ~140 W idle, temperature lagging power with a 3-minute time constant over a diurnal
ambient, each GPU with its own manufacturing offsets (power draw, temperature, clock) so peers
are close but not equal. Counters start from plausible since-boot values.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

import numpy as np
from numpy.typing import NDArray

from ..model import FloatArray
from .catalog import DCGM_BLANK_FIELDS, DCGM_BLANK_VALUE
from .scenario import Scenario

BoolGrid = NDArray[np.bool_]
# Per-phase levels (IDLE, INIT, TRAIN, CHECKPOINT, HUNG), see workload.py.
_UTIL = np.array([0.0, 25.0, 98.0, 12.0, 100.0])
_POWER = np.array([140.0, 380.0, 930.0, 320.0, 260.0])
_TENSOR = np.array([0.0, 0.05, 0.55, 0.03, 0.0])
_DRAM = np.array([0.0, 0.10, 0.42, 0.05, 0.02])
_SM_ACTIVE = np.array([0.0, 0.2, 0.92, 0.1, 0.99])  # a hung NCCL kernel keeps SMs busy
_NVLINK = np.array([0.0, 5e9, 2.8e11, 1e10, 0.0])  # bytes/s
_PCIE = np.array([1e6, 4e9, 2.5e9, 6e9, 1e6])  # bytes/s; checkpoints copy device -> host
_COPY = np.array([0.0, 8.0, 38.0, 20.0, 0.0])
_FB_USED = np.array([0.0, 120_000.0, 168_000.0, 168_000.0, 168_000.0])  # MiB
_SM_CLOCK = np.array([345.0, 1965.0, 1830.0, 1965.0, 1965.0])  # MHz
FB_TOTAL, FB_RESERVED, MEM_CLOCK = 183_359.0, 571.0, 3_996.0


@dataclass(slots=True)
class GpuDrive:
    """Failure inputs of one tick, (nodes, gpus) each; ``reset`` restores the no-fault state."""

    util_add: FloatArray
    clock_add: FloatArray
    temp_add: FloatArray
    power_factor: FloatArray
    tensor_factor: FloatArray
    nvlink_factor: FloatArray
    pcie_factor: FloatArray
    sbe: FloatArray
    dbe: FloatArray
    pcie_replay: FloatArray
    nvl_crc_flit: FloatArray
    nvl_crc_data: FloatArray
    nvl_replay: FloatArray
    nvl_recovery: FloatArray
    remap_corr: FloatArray
    remap_unc: FloatArray
    power_viol: FloatArray
    thermal_viol: FloatArray
    dead: BoolGrid
    vanished: BoolGrid
    remap_failure: BoolGrid

    @classmethod
    def zeros(cls, nodes: int, gpus: int) -> GpuDrive:
        names = [f.name for f in fields(cls)]
        flags = {"dead", "vanished", "remap_failure"}
        arrays = {
            name: np.zeros((nodes, gpus), bool if name in flags else np.float64) for name in names
        }
        drive = cls(**arrays)
        drive.reset()
        return drive

    def reset(self) -> None:
        for name, value in _RESET_VALUES:  # dataclasses.fields() per tick costs ~20 us
            getattr(self, name).fill(value)


_RESET_VALUES = tuple(
    (f.name, 1.0 if f.name.endswith("_factor") else 0.0) for f in fields(GpuDrive)
)


class GpuModel:
    """Holds per-GPU offsets and counters; ``step`` returns field -> (nodes, gpus) values."""

    def __init__(self, sc: Scenario, rng: np.random.Generator, noisy: NDArray[np.int64]) -> None:
        shape = (sc.nodes, sc.gpus)
        self.sc = sc
        self.power_scale = rng.normal(1.0, 0.03, shape)
        self.temp_offset = rng.normal(0.0, 2.0, shape) + rng.normal(0.0, 1.0, (sc.nodes, 1))
        self.clock_offset = rng.normal(0.0, 8.0, shape)
        self.noise = np.full((sc.nodes, 1), sc.noise_scale)
        self.noise[noisy] *= 4.0
        self.temp = 30.0 + self.temp_offset
        self.alpha = 1.0 - math.exp(-sc.step_s / 180.0)
        counters = (
            "energy",
            "pcie_replay",
            "nvlink",
            "nvlink_l0",
            "sbe_vol",
            "dbe_vol",
            "sbe_agg",
            "dbe_agg",
            "crc_flit",
            "crc_data",
            "nvl_replay",
            "nvl_recovery",
            "power_viol",
            "thermal_viol",
            "low_util_viol",
            "clock_events",
            "remap_corr",
            "remap_unc",
        )
        self.total = {name: np.zeros(shape) for name in counters}
        self.total["energy"] += rng.uniform(1e9, 5e10, shape)
        self.total["nvlink"] += rng.uniform(1e14, 1e15, shape)
        self.total["nvlink_l0"] += self.total["nvlink"] / 18.0  # 18 NVLink5 links per B200
        self.total["sbe_agg"] += rng.poisson(0.3, shape)
        self.total["pcie_replay"] += rng.poisson(0.5, shape)

    def step(
        self,
        t_abs: float,
        phase: NDArray[np.int8],
        wobble: FloatArray,
        d: GpuDrive,
        rng: np.random.Generator,
    ) -> dict[str, FloatArray]:
        """One tick. ``phase``/``wobble``: (nodes,) from the workload, or (nodes, gpus) where
        GPUs of a node run different jobs (``workload.gpu_phase``); ``d``: failure inputs."""
        sc, dt, shape = self.sc, self.sc.step_s, self.temp.shape
        noise = rng.standard_normal((4, *shape)) * self.noise
        p = phase if phase.ndim == 2 else phase[:, None]
        busy = (wobble if wobble.ndim == 2 else wobble[:, None]) * (p == 2)
        live = ~d.dead
        util = np.clip(_UTIL[p] * (1.0 + busy) + d.util_add + 0.8 * noise[0], 0.0, 100.0) * live
        power = (
            _POWER[p] * self.power_scale * (1.0 + 2.0 * busy) + 6.0 * noise[1]
        ) * d.power_factor
        power = np.where(live, power, 95.0 + 2.0 * noise[1])
        hour = (t_abs % 86400.0) / 3600.0
        ambient = 24.0 + sc.diurnal_amplitude_c * math.sin(2.0 * math.pi * (hour - 9.0) / 24.0)
        target = ambient + 8.0 + 0.045 * power + self.temp_offset + d.temp_add
        self.temp += (target - self.temp) * self.alpha + 0.3 * noise[2]
        clock = np.minimum(_SM_CLOCK[p] + self.clock_offset + d.clock_add + 10 * noise[3], 1965.0)
        tensor = np.clip(_TENSOR[p] * (1.0 + busy) * d.tensor_factor, 0.0, 1.0) * live
        nvlink = _NVLINK[p] * (1.0 + 3.0 * busy) * d.nvlink_factor * live
        pcie = _PCIE[p] * d.pcie_factor * live * (1.0 + 0.05 * np.abs(noise[0]))
        capped = (p == 2) & (power > 900.0)  # training at the power limit trims clocks a little
        tot = self.total
        tot["energy"] += power * dt * 1000.0
        tot["nvlink"] += nvlink * dt
        tot["nvlink_l0"] += nvlink * dt / 18.0
        tot["pcie_replay"] += d.pcie_replay
        tot["sbe_vol"] += d.sbe + (rng.random(shape) < 2e-5)
        tot["sbe_agg"] += d.sbe
        tot["dbe_vol"] += d.dbe
        tot["dbe_agg"] += d.dbe
        tot["crc_flit"] += d.nvl_crc_flit
        tot["crc_data"] += d.nvl_crc_data
        tot["nvl_replay"] += d.nvl_replay
        tot["nvl_recovery"] += d.nvl_recovery
        tot["power_viol"] += d.power_viol + capped * dt * 1e9 * 0.05
        tot["thermal_viol"] += d.thermal_viol
        tot["low_util_viol"] += (util < 5.0) * dt * 1e9
        tot["clock_events"] += capped | (d.power_viol > 0) | (d.thermal_viol > 0)
        tot["remap_corr"] += d.remap_corr
        tot["remap_unc"] += d.remap_unc
        fb_used = np.round(_FB_USED[p] + 40.0 * noise[3] * (p > 0))
        zeros = np.zeros(shape)
        values = {
            "DCGM_FI_DEV_SM_CLOCK": np.round(clock),
            "DCGM_FI_DEV_MEM_CLOCK": np.full(shape, MEM_CLOCK),
            "DCGM_FI_DEV_MEMORY_TEMP": np.round(self.temp + 5.0 + 0.004 * power),
            "DCGM_FI_DEV_GPU_TEMP": np.round(self.temp),
            "DCGM_FI_DEV_POWER_USAGE": np.round(power, 3),
            "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": np.floor(tot["energy"]),
            "DCGM_FI_PROF_PCIE_TX_BYTES": np.round(pcie),
            "DCGM_FI_PROF_PCIE_RX_BYTES": np.round(pcie * 0.6),
            "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": tot["pcie_replay"],
            "DCGM_FI_DEV_GPU_UTIL": np.round(util),
            "DCGM_FI_DEV_MEM_COPY_UTIL": _COPY[p] * live + zeros,
            "DCGM_FI_DEV_ENC_UTIL": zeros,
            "DCGM_FI_DEV_DEC_UTIL": zeros,
            "DCGM_FI_DEV_POWER_VIOLATION": tot["power_viol"],
            "DCGM_FI_DEV_THERMAL_VIOLATION": tot["thermal_viol"],
            "DCGM_FI_DEV_SYNC_BOOST_VIOLATION": zeros,
            "DCGM_FI_DEV_BOARD_LIMIT_VIOLATION": zeros,
            "DCGM_FI_DEV_LOW_UTIL_VIOLATION": tot["low_util_viol"],
            "DCGM_FI_DEV_RELIABILITY_VIOLATION": zeros,
            "DCGM_EXP_CLOCK_EVENTS_COUNT": tot["clock_events"],
            "DCGM_EXP_GPU_HEALTH_STATUS": d.dead * 20.0,  # DCGM_HEALTH_RESULT_FAIL
            "DCGM_EXP_P2P_STATUS": zeros + d.dead * (d.nvlink_factor < 1.0),
            "DCGM_FI_DEV_FB_FREE": FB_TOTAL - FB_RESERVED - fb_used,
            "DCGM_FI_DEV_FB_USED": fb_used,
            "DCGM_FI_DEV_FB_RESERVED": np.full(shape, FB_RESERVED),
            "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": tot["sbe_vol"],
            "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": tot["dbe_vol"],
            "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL": tot["sbe_agg"],
            "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL": tot["dbe_agg"],
            "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL": tot["crc_flit"],
            "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL": tot["crc_data"],
            "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL": tot["nvl_replay"],
            "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL": tot["nvl_recovery"],
            "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL": np.floor(tot["nvlink"]),
            "DCGM_FI_DEV_NVLINK_BANDWIDTH_L0": np.floor(tot["nvlink_l0"]),
            "DCGM_FI_DEV_VGPU_LICENSE_STATUS": zeros,
            "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": tot["remap_unc"],
            "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": tot["remap_corr"],
            "DCGM_FI_DEV_ROW_REMAP_FAILURE": d.remap_failure + zeros,
            "DCGM_FI_PROF_GR_ENGINE_ACTIVE": util / 100.0 * 0.99,
            "DCGM_FI_PROF_SM_ACTIVE": _SM_ACTIVE[p] * live * (1.0 + busy),
            "DCGM_FI_PROF_SM_OCCUPANCY": _SM_ACTIVE[p] * live * 0.45,
            "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": tensor,
            "DCGM_FI_PROF_DRAM_ACTIVE": _DRAM[p] * live * (1.0 + busy),
            "DCGM_FI_PROF_PIPE_FP64_ACTIVE": zeros,
            "DCGM_FI_PROF_PIPE_FP32_ACTIVE": tensor * 0.08,
            "DCGM_FI_PROF_PIPE_FP16_ACTIVE": tensor * 0.02,
        }
        blank = np.full(shape, float(DCGM_BLANK_VALUE))
        for name in DCGM_BLANK_FIELDS:
            values[name] = blank
        return values
