"""The demo's inputs: images of coloured shapes, each with a caption naming what it shows."""

from __future__ import annotations

from pathlib import Path

COLOURS = {"red": (220, 40, 40), "green": (40, 170, 60), "blue": (40, 80, 220),
           "yellow": (240, 210, 40), "purple": (140, 60, 180), "orange": (245, 140, 30)}
BACKGROUNDS = {"white": (245, 245, 245), "black": (15, 15, 15), "grey": (128, 128, 128)}
SHAPES = ("circle", "square", "triangle")


def make_images(folder: Path, n: int = 24) -> list[tuple[str, str]]:
    """n PNG images of a coloured shape on a plain background, each with a caption naming them;
    returns [(file name, caption)]. Deterministic."""
    from PIL import Image, ImageDraw

    folder.mkdir(parents=True, exist_ok=True)
    colours, backs = list(COLOURS), list(BACKGROUNDS)
    made = []
    for i in range(n):
        shape, colour = SHAPES[i % 3], colours[(i // 3) % len(colours)]
        back = backs[i % len(backs)]
        w, h = (160, 120) if i % 2 else (120, 160)
        img = Image.new("RGB", (w, h), BACKGROUNDS[back])
        d = ImageDraw.Draw(img)
        s = min(w, h) * (0.35 + 0.1 * (i % 4))
        cx, cy = w / 2 + (i % 5 - 2) * 6, h / 2 + (i % 3 - 1) * 6
        box = (cx - s / 2, cy - s / 2, cx + s / 2, cy + s / 2)
        if shape == "circle":
            d.ellipse(box, fill=COLOURS[colour])
        elif shape == "square":
            d.rectangle(box, fill=COLOURS[colour])
        else:
            d.polygon([(cx, box[1]), (box[2], box[3]), (box[0], box[3])], fill=COLOURS[colour])
        size = "large" if s > min(w, h) * 0.5 else "small"
        caption = f"a {size} {colour} {shape} on a {back} background"
        name = f"shape_{i:03d}"
        img.save(folder / f"{name}.png")
        (folder / f"{name}.txt").write_text(caption + "\n", encoding="utf-8")
        made.append((f"{name}.png", caption))
    return made
