"""The rows of the device table (:mod:`advisor.trace.gpus` reads them): one GPU a row, each
citing the vendor document its figures come from by a key of the list below.

Figures are the vendors' datasheet numbers for **dense** math in TFLOP/s: where a datasheet
quotes "with sparsity" (NVIDIA's Tensor Core figures since Ampere, AMD's sparse matrix figures)
the dense figure, half of it, is used. FP16 figures are with FP32 accumulation (what PyTorch's
matmuls use; GeForce cards run FP16 accumulation twice as fast, and their FP32-accumulate rate
is the one taken). Figures are per device as PyTorch sees it: an MI250/MI250X is two devices,
one per GCD, so its rows are half the card. Limits per SM (NVIDIA) or CU (AMD): resident
threads, shared memory (LDS); L2 is the whole device's (AMD: the sum over XCDs, 4 MB each on
CDNA3/4). A figure a datasheet does not give is ``-`` (None); the FP64 rate of a GPU whose
datasheet leaves it out is its architecture's FP32 ratio (1/32 on Pascal GP102/GP104 and
Turing, 1/64 on GA10x, AD10x and GB20x).

Columns: ``fp32`` FP32 on CUDA cores / vector units; ``tf32`` FP32 inputs on Tensor Cores
(TF32) or on AMD matrix cores (XF32 on CDNA3, else FP32 MFMA), 0 where there is none; ``bf16``,
``fp16`` on Tensor / matrix cores, 0 where the format has no tensor math (Pascal, BF16 before
Ampere: the FP32 rate is used); ``fp8``, 0 where there is none; ``fp64`` vector FP64; ``mem``
memory bandwidth in GB/s; ``link``: the link collectives between the GPUs of one machine use,
with its peak per direction in GB/s (``nvlink:300``; ``pcie3``/``pcie4``/``pcie5``: a x16 slot,
15.75/31.5/63 GB/s; ``xgmi:448``; ``-``: none known). SXM/OAM parts are taken with their
NVLink/Infinity Fabric; PCIe cards with the PCIe slot (an optional bridge is not assumed).

Sources (the document each row cites by its key):

- ``v100``: NVIDIA Tesla V100 GPU Accelerator datasheet (SXM2 and PCIe columns),
  https://images.nvidia.com/content/technologies/volta/pdf/volta-v100-datasheet-update-us-1165301-r5.pdf;
  SMs, L2, per-SM limits, NVLink: NVIDIA Tesla V100 GPU Architecture whitepaper (table 1, 3).
- ``v100s``: NVIDIA V100S PCIe datasheet (the V100 datasheet's V100S column), as ``v100``.
- ``t4``: NVIDIA T4 Tensor Core GPU datasheet,
  https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/tesla-t4/t4-tensor-core-datasheet-951643.pdf;
  SMs, L2, limits: NVIDIA Turing GPU Architecture whitepaper (appendix A).
- ``turing``: NVIDIA Turing GPU Architecture whitepaper, appendix A (GeForce RTX 2080 Ti,
  2080, 2070 at reference clocks; Quadro RTX 6000/8000, TITAN RTX),
  https://images.nvidia.com/aem-dam/en-zz/Solutions/design-visualization/technologies/turing-architecture/NVIDIA-Turing-Architecture-Whitepaper.pdf;
  Quadro RTX 5000: its datasheet (NVIDIA Quadro RTX 5000 data sheet).
- ``pascal``: NVIDIA Tesla P100 datasheet (SXM2, PCIe 16 and 12 GB), NVIDIA Quadro GP100 data
  sheet, NVIDIA Tesla P40 and P4 datasheets; SMs, L2, limits: NVIDIA Tesla P100 whitepaper
  (GP100) and GeForce GTX 1080 whitepaper (GP104; GTX 1080 Ti: GP102, the same SM).
- ``titanv``: NVIDIA TITAN V product page (110 deep learning TFLOPS, 12 GB HBM2 at 653 GB/s);
  the SM, L2 and limits of the V100 (GV100) whitepaper.
- ``a100``: NVIDIA A100 Tensor Core GPU datasheet (SXM and PCIe, 40 and 80 GB),
  https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf;
  SMs, L2, limits: NVIDIA A100 Tensor Core GPU Architecture whitepaper (table 3). The A800
  (NVIDIA A800 datasheet) is the A100 with NVLink at 400 GB/s.
- ``a30``: NVIDIA A30 Tensor Core GPU datasheet; SMs, L2: the A100 whitepaper's GA100.
- ``a40``: NVIDIA A40 datasheet (FP32 37.4, TF32 74.8, FP16/BF16 149.7 TFLOPS dense, 696 GB/s).
- ``a2``: NVIDIA A2 Tensor Core GPU datasheet.
- ``a10``: NVIDIA A10 Tensor Core GPU datasheet,
  https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a10/pdf/datasheet-new/nvidia-a10-datasheet.pdf.
  The A10G (AWS EC2 G5) has no datasheet of its own: the A10's figures are used (the same GA102
  die; the A10G reports 80 SMs to the A10's 72, so its true peaks are at least these, and an
  efficiency against them errs high).
- ``rtxa``: NVIDIA RTX A6000, A5000 and A4000 datasheets (FP32, "Tensor performance" with
  sparsity, halved here; TF32 at half the FP16 rate as on the A40).
- ``ga102``: NVIDIA Ampere GA102 GPU Architecture whitepaper, appendix A (GeForce RTX 3090,
  3080, 3070; RTX 3060, 3080 Ti and 3090 Ti from their GeForce product pages at the same
  per-SM rates),
  https://www.nvidia.com/content/PDF/nvidia-ampere-ga-102-gpu-architecture-whitepaper-v2.pdf.
- ``ada``: NVIDIA Ada GPU Architecture whitepaper, appendix A (GeForce RTX 4090, 4080; RTX 6000
  Ada Generation), https://images.nvidia.com/aem-dam/Solutions/geforce/ada/nvidia-ada-gpu-architecture.pdf.
- ``l4``: NVIDIA L4 Tensor Core GPU datasheet,
  https://resources.nvidia.com/en-us-data-center-overview/l4-gpu-datasheet.
- ``l40``: NVIDIA L40 and L40S datasheets,
  https://resources.nvidia.com/en-us-l40s/l40s-datasheet-28413.
- ``h100``: NVIDIA H100 Tensor Core GPU datasheet (SXM, PCIe, NVL columns),
  https://resources.nvidia.com/en-us-tensor-core/nvidia-tensor-core-gpu-datasheet;
  SMs, L2, limits: NVIDIA H100 Tensor Core GPU Architecture whitepaper (table 3). The H800
  (NVIDIA H800 datasheet) is the H100 with NVLink at 400 GB/s and FP64 at 1 TFLOPS.
- ``h200``: NVIDIA H200 Tensor Core GPU datasheet (SXM and NVL columns),
  https://resources.nvidia.com/en-us-data-center-overview-mc/en-us-data-center-overview/hpc-datasheet-sc23-h200.
- ``gh200``: NVIDIA GH200 Grace Hopper Superchip datasheet (the 96 GB HBM3 variant's 4 TB/s;
  the HBM3e variant has 4.9 TB/s),
  https://resources.nvidia.com/en-us-grace-cpu/grace-hopper-superchip.
- ``b200``: NVIDIA HGX B200 / DGX B200 datasheets (eight-GPU totals divided by eight: FP32
  600 TF, TF32 18 PF, FP16/BF16 36 PF, FP8 72 PF sparse, FP64 296 TF, 64 TB/s),
  https://resources.nvidia.com/en-us-dgx-systems/dgx-b200-datasheet; 148 SMs as the GPU
  reports them (``deviceProperties`` of a B200 trace).
- ``b300``: NVIDIA HGX B300 datasheet (eight-GPU totals divided by eight: FP32 600 TF, TF32
  18 PF, FP16/BF16 36 PF, FP8 72 PF sparse, FP64 10 TF, 8 TB/s per GPU),
  https://www.nvidia.com/en-us/data-center/hgx/; 148 SMs as the GPU reports them.
- ``rtxbw``: NVIDIA RTX Blackwell GPU Architecture whitepaper, appendix (GeForce RTX 5090:
  FP16 Tensor with FP32 accumulate 209.5 TFLOPS dense, FP8 419, 1,792 GB/s, 170 SMs).
- ``gb10``: NVIDIA DGX Spark datasheet (GB10 Grace Blackwell Superchip: 1 PFLOP FP4 with
  sparsity, 6,144 CUDA cores, 128 GB LPDDR5x at 273 GB/s). Dense FP8 and FP16 are the FP4
  figure halved (sparsity) and halved again per doubling of the format, then halved for FP32
  accumulation as on RTX Blackwell parts; FP32 is 6,144 cores x 2 FLOP x 2.5 GHz: lower
  bounds, so efficiencies err high.
- ``mi1``: AMD Instinct MI100 datasheet (FP32 23.1, FP32 matrix 46.1, FP16 184.6, BF16 92.3,
  FP64 11.5 TFLOPS, 1.23 TB/s), https://www.amd.com/en/products/accelerators/instinct/mi100.html.
- ``mi2``: AMD Instinct MI250X, MI250 and MI210 datasheets (per OAM module of two GCDs for the
  MI250/MI250X, halved here), https://www.amd.com/en/products/accelerators/instinct/mi200.html;
  CUs, L2, LDS, VGPRs: AMD ROCm documentation, "AMD GPU specifications",
  https://rocm.docs.amd.com/en/latest/reference/gpu-specs.html (the two GCDs of one package are
  joined by four Infinity Fabric links, 200 GB/s per direction).
- ``mi3``: AMD Instinct MI300X, MI300A and MI325X datasheets,
  https://www.amd.com/en/products/accelerators/instinct/mi300.html; CUs, L2, LDS, VGPRs:
  ROCm "AMD GPU specifications" (as above); seven Infinity Fabric links of 64 GB/s per direction.
- ``mi35``: AMD Instinct MI350X and MI355X datasheets,
  https://www.amd.com/en/products/accelerators/instinct/mi350.html (no TF32: the FP32 matrix
  figure stands in the ``tf32`` column); CUs, L2, LDS: ROCm "AMD GPU specifications".
- ``rdna3``: AMD Radeon RX 7900 XTX and Radeon PRO W7900 specifications (FP32 61.4 and 61.3,
  FP16 122.8 and 122.6 TFLOPS), https://www.amd.com/en/products/graphics/desktops/radeon.html;
  CUs, L2, LDS: ROCm "AMD GPU specifications".
"""

# One row a GPU, in matching order (a more specific name before a more general one): name |
# vendor | arch | dense TFLOP/s: fp32, tf32, bf16, fp16, fp8, fp64 | memory GB/s | SMs or CUs |
# memory GB | L2 MiB (- unknown) | threads per SM/CU | shared memory (LDS) KiB per SM/CU | link |
# source | regular expression over the upper-cased device name ("AMD Instinct MI300X VF",
# "NVIDIA A100-SXM4-80GB", "Tesla V100-PCIE-16GB"...).
ROWS = r"""
Quadro GP100     | nvidia | sm_60  |  10.3 |     0 |      0 |      0 |      0 |  5.2 |  717 |  56 |  16 |  4 | 2048 |  64 | pcie3      | pascal | GP100
P100 PCIe 12GB   | nvidia | sm_60  |   9.3 |     0 |      0 |      0 |      0 |  4.7 |  549 |  56 |  12 |  4 | 2048 |  64 | pcie3      | pascal | P100.*PCIE
P100 PCIe 16GB   | nvidia | sm_60  |   9.3 |     0 |      0 |      0 |      0 |  4.7 |  732 |  56 |  16 |  4 | 2048 |  64 | pcie3      | pascal | P100.*PCIE
P100 SXM2        | nvidia | sm_60  |  10.6 |     0 |      0 |      0 |      0 |  5.3 |  732 |  56 |  16 |  4 | 2048 |  64 | nvlink:80  | pascal | P100
P40              | nvidia | sm_61  |    12 |     0 |      0 |      0 |      0 | 0.38 |  346 |  30 |  24 |  3 | 2048 |  96 | pcie3      | pascal | \bP40\b
P4               | nvidia | sm_61  |   5.5 |     0 |      0 |      0 |      0 | 0.17 |  192 |  20 |   8 |  2 | 2048 |  96 | pcie3      | pascal | \bP4\b
GTX 1080 Ti      | nvidia | sm_61  |  11.3 |     0 |      0 |      0 |      0 | 0.35 |  484 |  28 |  11 |2.75| 2048 |  96 | pcie3      | pascal | GTX 1080 TI
TITAN V          | nvidia | sm_70  |  14.9 |     0 |      0 |    110 |      0 | 7.45 |  653 |  80 |  12 |4.5 | 2048 |  96 | pcie3      | titanv | TITAN V\b
V100S PCIe       | nvidia | sm_70  |  16.4 |     0 |      0 |    130 |      0 |  8.2 | 1134 |  80 |  32 |  6 | 2048 |  96 | pcie3      | v100s  | V100S
V100 PCIe        | nvidia | sm_70  |  14.0 |     0 |      0 |    112 |      0 |  7.0 |  900 |  80 |  32 |  6 | 2048 |  96 | pcie3      | v100   | V100.*PCIE
V100 SXM2        | nvidia | sm_70  |  15.7 |     0 |      0 |    125 |      0 |  7.8 |  900 |  80 |  32 |  6 | 2048 |  96 | nvlink:150 | v100   | V100
T4               | nvidia | sm_75  |   8.1 |     0 |      0 |     65 |      0 | 0.25 |  320 |  40 |  16 |  4 | 1024 |  64 | pcie3      | t4     | \bT4\b
RTX 2080 Ti      | nvidia | sm_75  |  13.4 |     0 |      0 |   53.8 |      0 | 0.42 |  616 |  68 |  11 |5.5 | 1024 |  64 | pcie3      | turing | RTX 2080 TI
RTX 2080         | nvidia | sm_75  |  10.1 |     0 |      0 |   40.3 |      0 | 0.31 |  448 |  46 |   8 |  4 | 1024 |  64 | pcie3      | turing | RTX 2080
RTX 2070         | nvidia | sm_75  |   7.5 |     0 |      0 |   29.9 |      0 | 0.23 |  448 |  36 |   8 |  4 | 1024 |  64 | pcie3      | turing | RTX 2070
TITAN RTX        | nvidia | sm_75  |  16.3 |     0 |      0 |  130.5 |      0 | 0.51 |  672 |  72 |  24 |  6 | 1024 |  64 | pcie3      | turing | TITAN RTX
Quadro RTX 8000  | nvidia | sm_75  |  16.3 |     0 |      0 |  130.5 |      0 | 0.51 |  672 |  72 |  48 |  6 | 1024 |  64 | pcie3      | turing | RTX 8000
Quadro RTX 6000  | nvidia | sm_75  |  16.3 |     0 |      0 |  130.5 |      0 | 0.51 |  672 |  72 |  24 |  6 | 1024 |  64 | pcie3      | turing | QUADRO RTX 6000
Quadro RTX 5000  | nvidia | sm_75  |  11.2 |     0 |      0 |   89.2 |      0 | 0.35 |  448 |  48 |  16 |  4 | 1024 |  64 | pcie3      | turing | QUADRO RTX 5000
A100 PCIe 40GB   | nvidia | sm_80  |  19.5 |   156 |    312 |    312 |      0 |  9.7 | 1555 | 108 |  40 | 40 | 2048 | 164 | pcie4      | a100   | A100.*PCIE
A100 PCIe 80GB   | nvidia | sm_80  |  19.5 |   156 |    312 |    312 |      0 |  9.7 | 1935 | 108 |  80 | 40 | 2048 | 164 | pcie4      | a100   | A100.*PCIE
A100 SXM 40GB    | nvidia | sm_80  |  19.5 |   156 |    312 |    312 |      0 |  9.7 | 1555 | 108 |  40 | 40 | 2048 | 164 | nvlink:300 | a100   | A100
A100 SXM 80GB    | nvidia | sm_80  |  19.5 |   156 |    312 |    312 |      0 |  9.7 | 2039 | 108 |  80 | 40 | 2048 | 164 | nvlink:300 | a100   | A100
A800 PCIe 80GB   | nvidia | sm_80  |  19.5 |   156 |    312 |    312 |      0 |  9.7 | 1935 | 108 |  80 | 40 | 2048 | 164 | pcie4      | a100   | A800.*PCIE
A800 SXM 80GB    | nvidia | sm_80  |  19.5 |   156 |    312 |    312 |      0 |  9.7 | 2039 | 108 |  80 | 40 | 2048 | 164 | nvlink:200 | a100   | A800
A30              | nvidia | sm_80  |  10.3 |    82 |    165 |    165 |      0 |  5.2 |  933 |  56 |  24 | 24 | 2048 | 164 | pcie4      | a30    | \bA30\b
A40              | nvidia | sm_86  |  37.4 |  74.8 |  149.7 |  149.7 |      0 | 0.58 |  696 |  84 |  48 |  6 | 1536 | 100 | pcie4      | a40    | \bA40\b
A10G             | nvidia | sm_86  |  31.2 |  62.5 |    125 |    125 |      0 | 0.98 |  600 |  80 |  24 |  6 | 1536 | 100 | pcie4      | a10    | \bA10G\b
A10              | nvidia | sm_86  |  31.2 |  62.5 |    125 |    125 |      0 | 0.98 |  600 |  72 |  24 |  6 | 1536 | 100 | pcie4      | a10    | \bA10\b
A2               | nvidia | sm_86  |   4.5 |     9 |     18 |     18 |      0 | 0.07 |  200 |  10 |  16 |  2 | 1536 | 100 | pcie4      | a2     | \bA2\b
RTX A6000        | nvidia | sm_86  |  38.7 |  77.4 |  154.8 |  154.8 |      0 | 0.60 |  768 |  84 |  48 |  6 | 1536 | 100 | pcie4      | rtxa   | RTX A6000
RTX A5000        | nvidia | sm_86  |  27.8 |  55.6 |  111.1 |  111.1 |      0 | 0.43 |  768 |  64 |  24 |  6 | 1536 | 100 | pcie4      | rtxa   | RTX A5000
RTX A4000        | nvidia | sm_86  |  19.2 |  38.4 |   76.7 |   76.7 |      0 | 0.30 |  448 |  48 |  16 |  4 | 1536 | 100 | pcie4      | rtxa   | RTX A4000
RTX 3060         | nvidia | sm_86  |  12.7 |  12.7 |   25.5 |   25.5 |      0 | 0.20 |  360 |  28 |  12 |  3 | 1536 | 100 | pcie4      | ga102  | RTX 3060
RTX 3070         | nvidia | sm_86  |  20.3 |  20.3 |   40.6 |   40.6 |      0 | 0.32 |  448 |  46 |   8 |  4 | 1536 | 100 | pcie4      | ga102  | RTX 3070
RTX 3080 Ti      | nvidia | sm_86  |  34.1 |  34.1 |   68.2 |   68.2 |      0 | 0.53 |  912 |  80 |  12 |  6 | 1536 | 100 | pcie4      | ga102  | RTX 3080 TI
RTX 3080         | nvidia | sm_86  |  29.8 |  29.8 |   59.5 |   59.5 |      0 | 0.47 |  760 |  68 |  10 |  5 | 1536 | 100 | pcie4      | ga102  | RTX 3080
RTX 3090 Ti      | nvidia | sm_86  |    40 |    40 |     80 |     80 |      0 | 0.63 | 1008 |  84 |  24 |  6 | 1536 | 100 | pcie4      | ga102  | RTX 3090 TI
RTX 3090         | nvidia | sm_86  |  35.6 |  35.6 |     71 |     71 |      0 | 0.56 |  936 |  82 |  24 |  6 | 1536 | 100 | pcie4      | ga102  | RTX 3090
RTX 4090         | nvidia | sm_89  |  82.6 |  82.6 |  165.2 |  165.2 |  330.3 | 1.29 | 1008 | 128 |  24 | 72 | 1536 | 100 | pcie4      | ada    | RTX 4090
RTX 4080         | nvidia | sm_89  |  48.7 |  48.7 |   97.5 |   97.5 |  194.9 | 0.76 |  717 |  76 |  16 | 64 | 1536 | 100 | pcie4      | ada    | RTX 4080
RTX 6000 Ada     | nvidia | sm_89  |  91.1 | 182.1 |  364.2 |  364.2 |  728.5 | 1.42 |  960 | 142 |  48 | 96 | 1536 | 100 | pcie4      | ada    | RTX 6000 ADA
L4               | nvidia | sm_89  |  30.3 |    60 |    121 |    121 |  242.5 | 0.49 |  300 |  58 |  24 | 48 | 1536 | 100 | pcie4      | l4     | \bL4\b
L40S             | nvidia | sm_89  |  91.6 |   183 | 362.05 | 362.05 |    733 | 1.43 |  864 | 142 |  48 |  - | 1536 | 100 | pcie4      | l40    | \bL40S\b
L40              | nvidia | sm_89  |  90.5 |  90.5 | 181.05 | 181.05 |    362 | 1.41 |  864 | 142 |  48 |  - | 1536 | 100 | pcie4      | l40    | \bL40\b
H100 PCIe        | nvidia | sm_90  |    51 |   378 |  756.5 |  756.5 |   1513 |   26 | 2000 | 114 |  80 | 50 | 2048 | 228 | pcie5      | h100   | H100.*PCIE
H100 NVL         | nvidia | sm_90  |    60 | 417.5 |  835.5 |  835.5 |   1671 |   30 | 3900 | 132 |  94 | 50 | 2048 | 228 | nvlink:300 | h100   | H100.*NVL
H100 SXM         | nvidia | sm_90  |    67 | 494.5 |  989.5 |  989.5 |   1979 |   34 | 3350 | 132 |  80 | 50 | 2048 | 228 | nvlink:450 | h100   | H100
H800 PCIe        | nvidia | sm_90  |    51 |   378 |  756.5 |  756.5 |   1513 |    1 | 2000 | 114 |  80 | 50 | 2048 | 228 | pcie5      | h100   | H800.*PCIE
H800 SXM         | nvidia | sm_90  |    67 | 494.5 |  989.5 |  989.5 |   1979 |    1 | 3350 | 132 |  80 | 50 | 2048 | 228 | nvlink:200 | h100   | H800
GH200            | nvidia | sm_90  |    67 | 494.5 |  989.5 |  989.5 |   1979 |   34 | 4000 | 132 |  96 | 50 | 2048 | 228 | nvlink:450 | gh200  | GH200
H200 NVL         | nvidia | sm_90  |    60 | 417.5 |  835.5 |  835.5 |   1671 |   30 | 4800 | 132 | 141 | 50 | 2048 | 228 | nvlink:450 | h200   | (?<!G)H200.*NVL
H200 SXM         | nvidia | sm_90  |    67 | 494.5 |  989.5 |  989.5 |   1979 |   34 | 4800 | 132 | 141 | 50 | 2048 | 228 | nvlink:450 | h200   | (?<!G)H200
B300             | nvidia | sm_103 |    75 |  1125 |   2250 |   2250 |   4500 | 1.25 | 8000 | 148 | 288 |  - | 2048 | 228 | nvlink:900 | b300   | B300
B200             | nvidia | sm_100 |    75 |  1125 |   2250 |   2250 |   4500 |   37 | 8000 | 148 | 180 |  - | 2048 | 228 | nvlink:900 | b200   | B200
RTX 5090         | nvidia | sm_120 | 104.8 | 104.8 |  209.5 |  209.5 |    419 | 1.64 | 1792 | 170 |  32 | 96 | 1536 | 100 | pcie5      | rtxbw  | RTX 5090
GB10             | nvidia | sm_121 |  30.7 | 31.25 |   62.5 |   62.5 |    125 | 0.48 |  273 |  48 | 128 |  - | 1536 | 100 | -          | gb10   | \bGB10\b
MI250X (one GCD) | amd    | gfx90a | 23.95 | 47.85 |  191.5 |  191.5 |      0 |23.95 | 1600 | 110 |  64 |  8 | 2048 |  64 | xgmi:200   | mi2    | MI250X
MI250 (one GCD)  | amd    | gfx90a | 22.65 | 45.25 | 181.05 | 181.05 |      0 |22.65 | 1600 | 104 |  64 |  8 | 2048 |  64 | xgmi:200   | mi2    | MI250
MI210            | amd    | gfx90a | 22.6  |  45.3 |    181 |    181 |      0 | 22.6 | 1638 | 104 |  64 |  8 | 2048 |  64 | pcie4      | mi2    | MI210
MI100            | amd    | gfx908 | 23.1  |  46.1 |   92.3 |  184.6 |      0 | 11.5 | 1229 | 120 |  32 |  8 | 2048 |  64 | pcie4      | mi1    | MI100
MI300A           | amd    | gfx942 | 122.6 | 490.3 |  980.6 |  980.6 | 1961.2 | 61.3 | 5300 | 228 | 128 | 24 | 2048 |  64 | -          | mi3    | MI300A
MI325X           | amd    | gfx942 | 163.4 | 653.7 | 1307.4 | 1307.4 | 2614.9 | 81.7 | 6000 | 304 | 256 | 32 | 2048 |  64 | xgmi:448   | mi3    | MI325X
MI300X           | amd    | gfx942 | 163.4 | 653.7 | 1307.4 | 1307.4 | 2614.9 | 81.7 | 5300 | 304 | 192 | 32 | 2048 |  64 | xgmi:448   | mi3    | MI300X
MI350X           | amd    | gfx950 | 144.2 | 144.2 | 2307.2 | 2307.2 | 4614.4 | 72.1 | 8000 | 256 | 288 | 32 | 2048 | 160 | -          | mi35   | MI350X
MI355X           | amd    | gfx950 | 157.3 | 157.3 | 2516.6 | 2516.6 | 5033.2 | 78.6 | 8000 | 256 | 288 | 32 | 2048 | 160 | -          | mi35   | MI355X
RX 7900 XTX      | amd    | gfx1100| 61.4  |     0 |  122.8 |  122.8 |      0 | 1.92 |  960 |  96 |  24 |  6 | 2048 |  64 | pcie4      | rdna3  | 7900 XTX
Radeon PRO W7900 | amd    | gfx1100| 61.3  |     0 |  122.6 |  122.6 |      0 | 1.92 |  864 |  96 |  48 |  6 | 2048 |  64 | pcie4      | rdna3  | W7900
"""
