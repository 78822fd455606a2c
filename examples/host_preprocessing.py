"""host-preprocessing: an inference loop in the style of a Hugging Face pipeline. Each request
is decoded and run through an image processor written with NumPy (resize, rescale, normalize,
one frame at a time) on the host, then the model runs: the device waits for all of it, every
request.

Fixed twin: host_preprocessing_fixed.py. Run: advisor profile examples/host_preprocessing.py
"""

import argparse

import numpy as np
import torch
import torch.nn as nn

SIZE, FRAMES = 112, 8
MEAN = np.array([0.45, 0.45, 0.45], dtype=np.float64)
STD = np.array([0.225, 0.225, 0.225], dtype=np.float64)


def decode(blob: bytes, height: int, width: int) -> list[np.ndarray]:
    """Stands for a video decoder: raw bytes to FRAMES HxWx3 uint8 frames."""
    data = np.frombuffer(blob, dtype=np.uint8).reshape(FRAMES, height, width, 3)
    return [frame.copy() for frame in data]


class ImageProcessor:
    """The NumPy image processor of many model hubs: one frame at a time, in float64."""

    def __call__(self, frames: list[np.ndarray]) -> np.ndarray:
        return self.preprocess(frames)

    def resize(self, frame: np.ndarray) -> np.ndarray:
        h, w, _ = frame.shape
        ys = (np.arange(SIZE) + 0.5) * h / SIZE - 0.5
        xs = (np.arange(SIZE) + 0.5) * w / SIZE - 0.5
        y0, x0 = np.clip(ys.astype(int), 0, h - 2), np.clip(xs.astype(int), 0, w - 2)
        wy, wx = (ys - y0)[:, None, None], (xs - x0)[None, :, None]
        f = frame.astype(np.float64)
        top = f[y0][:, x0] * (1 - wx) + f[y0][:, x0 + 1] * wx
        bottom = f[y0 + 1][:, x0] * (1 - wx) + f[y0 + 1][:, x0 + 1] * wx
        return top * (1 - wy) + bottom * wy

    def preprocess(self, frames: list[np.ndarray]) -> np.ndarray:
        out = []
        for frame in frames:
            x = self.resize(frame) / 255.0
            x = (x - MEAN) / STD
            out.append(x.transpose(2, 0, 1))
        return np.array(out, dtype=np.float32)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=30)
    args = ap.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = nn.Sequential(
        nn.Conv3d(3, 16, 3, stride=2, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool3d(1),
        nn.Flatten(),
        nn.Linear(16, 10),
    ).to(device)
    model.eval()
    processor = ImageProcessor()
    rng = np.random.default_rng(0)
    labels = []
    for _ in range(args.steps):
        blob = rng.integers(0, 255, FRAMES * 240 * 320 * 3, dtype=np.uint8).tobytes()
        frames = decode(blob, 240, 320)
        pixels = torch.from_numpy(processor(frames)).unsqueeze(0)  # on the host, every request
        with torch.inference_mode():
            logits = model(pixels.permute(0, 2, 1, 3, 4).to(device))
        labels.append(logits.argmax())
    print("labels:", torch.stack(labels)[:5].tolist())


if __name__ == "__main__":
    main()
