// Charts drawn on <canvas>: a live line chart and stacked bars per minute. No libraries.
"use strict";

const KEEP_POINTS = 120;
const FONT = "11px system-ui, sans-serif";

function niceMax(v, integer = false) {
  if (integer && v <= 4) return 4;
  if (v <= 0) return 1;
  const exp = Math.pow(10, Math.floor(Math.log10(v)));
  for (const m of [1, 2, 5, 10]) if (v <= m * exp) return m * exp;
  return 10 * exp;
}

function short(v) {
  if (v >= 1e6) return (v / 1e6).toFixed(1) + "M";
  if (v >= 1e3) return (v / 1e3).toFixed(1) + "k";
  return Number.isInteger(v) ? String(v) : v.toFixed(1);
}

/** Size the canvas to its box at the screen's pixel ratio; returns [ctx, w, h]. */
function prepare(canvas) {
  const ratio = window.devicePixelRatio || 1;
  const w = canvas.clientWidth || Number(canvas.getAttribute("width")) || 300;
  const hgt = canvas.clientHeight || Number(canvas.getAttribute("height")) || 150;
  if (canvas.width !== Math.round(w * ratio) || canvas.height !== Math.round(hgt * ratio)) {
    canvas.width = Math.round(w * ratio);
    canvas.height = Math.round(hgt * ratio);
  }
  const ctx = canvas.getContext("2d");
  ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
  ctx.clearRect(0, 0, w, hgt);
  return [ctx, w, hgt];
}

function grid(ctx, w, hgt, box, max, fmt = short) {
  ctx.font = FONT;
  ctx.fillStyle = "#6b7685";
  ctx.strokeStyle = "#e6e9ee";
  ctx.lineWidth = 1;
  for (let i = 0; i <= 4; i++) {
    const y = Math.round(box.top + ((hgt - box.top - box.bottom) * i) / 4) + 0.5;
    ctx.beginPath();
    ctx.moveTo(box.left, y);
    ctx.lineTo(w - box.right, y);
    ctx.stroke();
    ctx.fillText(fmt(max * (1 - i / 4)), 4, y + 4);
  }
}

export class LineChart {
  constructor(canvas, series) {
    this.canvas = canvas;
    this.series = series; // [{key, color}]
    this.points = []; // [{t, values}]
  }

  push(t, values) {
    this.points.push({ t, values });
    if (this.points.length > KEEP_POINTS) this.points.shift();
    this.canvas.dataset.points = String(this.points.length);
    this.canvas.dataset.last = JSON.stringify(values);
    this.draw();
  }

  draw() {
    const [ctx, w, hgt] = prepare(this.canvas);
    const box = { left: 46, right: 8, top: 10, bottom: 20 };
    let max = 0;
    for (const p of this.points) for (const s of this.series) max = Math.max(max, p.values[s.key] || 0);
    max = niceMax(max);
    grid(ctx, w, hgt, box, max);
    if (this.points.length < 2) return;
    const t0 = this.points[0].t, t1 = this.points[this.points.length - 1].t;
    const span = Math.max(t1 - t0, 1);
    ctx.fillText(`last ${Math.round(span / 1000)} s`, w - box.right - 60, hgt - 5);
    for (const s of this.series) {
      ctx.strokeStyle = s.color;
      ctx.lineWidth = 2;
      ctx.beginPath();
      this.points.forEach((p, i) => {
        const x = box.left + ((w - box.left - box.right) * (p.t - t0)) / span;
        const v = p.values[s.key] || 0;
        const y = box.top + (hgt - box.top - box.bottom) * (1 - v / max);
        if (i === 0) ctx.moveTo(x, y);
        else ctx.lineTo(x, y);
      });
      ctx.stroke();
    }
  }
}

/**
 * Bars per minute, stacked by series: rows [{minute (ms), <key>: n}], series [{key, color}].
 * An optional line (key, color, max) is drawn over them against its own right-hand scale.
 */
export function drawStackedBars(canvas, rows, series, { minutes = 60, line } = {}) {
  const [ctx, w, hgt] = prepare(canvas);
  const box = { left: 46, right: line ? 38 : 8, top: 10, bottom: 20 };
  const now = Math.floor(Date.now() / 60000) * 60000;
  const start = now - (minutes - 1) * 60000;
  const byMinute = new Map(rows.map((r) => [r.minute, r]));
  let max = 0;
  for (let m = start; m <= now; m += 60000) {
    const r = byMinute.get(m);
    if (r) max = Math.max(max, series.reduce((a, s) => a + (r[s.key] || 0), 0));
  }
  max = niceMax(max, true);
  grid(ctx, w, hgt, box, max);
  const plotW = w - box.left - box.right;
  const plotH = hgt - box.top - box.bottom;
  const bw = plotW / minutes;
  for (let i = 0; i < minutes; i++) {
    const r = byMinute.get(start + i * 60000);
    if (!r) continue;
    let y = box.top + plotH;
    for (const s of series) {
      const v = r[s.key] || 0;
      if (!v) continue;
      const bh = (plotH * v) / max;
      ctx.fillStyle = s.color;
      ctx.fillRect(box.left + i * bw + 0.5, y - bh, Math.max(1, bw - 1), bh);
      y -= bh;
    }
  }
  ctx.fillStyle = "#6b7685";
  ctx.fillText(`${minutes} min`, box.left, hgt - 5);
  ctx.fillText("now", w - box.right - 22, hgt - 5);
  if (line) {
    const lmax = line.max || 1;
    ctx.fillStyle = line.color;
    ctx.fillText(line.label || "", w - box.right + 4, box.top + 8);
    ctx.strokeStyle = line.color;
    ctx.lineWidth = 2;
    ctx.beginPath();
    // a minute without records is a gap in the line, not a stroke across it
    let started = false;
    let segments = 0;
    for (let i = 0; i < minutes; i++) {
      const r = byMinute.get(start + i * 60000);
      if (!r || r[line.key] === undefined) {
        started = false;
        continue;
      }
      const x = box.left + i * bw + bw / 2;
      const y = box.top + plotH * (1 - Math.min(1, r[line.key] / lmax));
      if (!started) {
        ctx.moveTo(x, y);
        segments += 1;
      } else ctx.lineTo(x, y);
      started = true;
      ctx.fillRect(x - 1.5, y - 1.5, 3, 3);
    }
    ctx.stroke();
    canvas.dataset.lineSegments = String(segments);
  }
  canvas.dataset.bars = String(rows.length);
}
