// WebVNC: a small RFB 3.8 client (security None; Raw and CopyRect
// encodings, 32-bit true colour) that shows a desktop box in the page's
// <canvas id="screen"> and sends the pointer and keys to it. The RFB
// stream comes over the websocket at this page's address + "/ws", which
// the portal relays to the coordinator and the coordinator to the box's
// VNC server. No library: this file is all of it.
"use strict";

(function () {
  const canvas = document.getElementById("screen");
  const status = document.getElementById("vnc-status");
  if (!canvas || !status) return;
  const ctx = canvas.getContext("2d");
  const proto = location.protocol === "https:" ? "wss:" : "ws:";
  const ws = new WebSocket(proto + "//" + location.host + location.pathname.replace(/\/$/, "") + "/ws");
  ws.binaryType = "arraybuffer";

  // Incoming bytes, consumed in order by the parser below.
  let chunks = [], queued = 0;
  function have(n) { return queued >= n; }
  function take(n) {
    const out = new Uint8Array(n);
    let off = 0;
    while (off < n) {
      const c = chunks[0], k = Math.min(c.length, n - off);
      out.set(c.subarray(0, k), off);
      off += k;
      if (k === c.length) chunks.shift(); else chunks[0] = c.subarray(k);
    }
    queued -= n;
    return out;
  }
  // peek returns the first n queued bytes without consuming them.
  function peek(n) {
    const saved = chunks.slice(), count = queued;
    const out = take(n);
    chunks = saved;
    queued = count;
    return out;
  }
  function u16(b, i) { return (b[i] << 8) | b[i + 1]; }
  function u32(b, i) { return ((b[i] << 24) >>> 0) + (b[i + 1] << 16) + (b[i + 2] << 8) + b[i + 3]; }
  function send(bytes) { if (ws.readyState === WebSocket.OPEN) ws.send(new Uint8Array(bytes)); }
  function be16(v) { return [(v >> 8) & 255, v & 255]; }
  function be32(v) { return [(v >>> 24) & 255, (v >>> 16) & 255, (v >>> 8) & 255, v & 255]; }
  function say(text, cls) { status.textContent = text; status.className = cls || ""; }

  let state = "version", width = 0, height = 0;
  let rects = 0, rect = null, frames = 0;

  function requestUpdate(incremental) {
    send([3, incremental ? 1 : 0, 0, 0, 0, 0].concat(be16(width), be16(height)));
  }

  function fail(text) {
    say(text, "error");
    state = "failed";
    ws.close();
  }

  // parse consumes what it can of the queued bytes; it returns when it
  // needs more.
  function parse() {
    for (;;) {
      switch (state) {
      case "version": {
        if (!have(12)) return;
        const v = String.fromCharCode.apply(null, take(12));
        if (!/^RFB 003\.(00[89]|0[1-9]\d)\n$/.test(v)) return fail("The desktop speaks " + v.trim() + "; this page needs RFB 3.8.");
        send(Array.from("RFB 003.008\n", (c) => c.charCodeAt(0)));
        state = "security";
        break;
      }
      case "security": {
        if (!have(1)) return;
        const n = peek(1)[0];
        if (n === 0) { take(1); state = "reason"; break; }
        if (!have(1 + n)) return;
        const types = take(1 + n).subarray(1);
        if (types.indexOf(1) < 0) return fail("The desktop wants a password; crabbox desktops have none.");
        send([1]);
        state = "result";
        break;
      }
      case "result": {
        if (!have(4)) return;
        if (u32(take(4), 0) !== 0) { state = "reason"; break; }
        send([1]); // ClientInit: shared
        state = "init";
        break;
      }
      case "reason": {
        if (!have(4)) return;
        const n = u32(peek(4), 0);
        if (!have(4 + n)) return;
        const b = take(4 + n);
        return fail("The desktop refused: " + String.fromCharCode.apply(null, b.subarray(4)));
      }
      case "init": {
        if (!have(24)) return;
        const nameLen = u32(peek(24), 20);
        if (!have(24 + nameLen)) return;
        const b = take(24 + nameLen);
        width = u16(b, 0);
        height = u16(b, 2);
        canvas.width = width;
        canvas.height = height;
        // SetPixelFormat: 32 bpp, depth 24, little-endian, true colour,
        // max 255 each, shifts 16/8/0. SetEncodings: CopyRect, Raw.
        send([0, 0, 0, 0, 32, 24, 0, 1, 0, 255, 0, 255, 0, 255, 16, 8, 0, 0, 0, 0]);
        send([2, 0, 0, 2].concat(be32(1), be32(0)));
        requestUpdate(false);
        say("Connected.", "ok");
        state = "message";
        break;
      }
      case "message": {
        if (!have(1)) return;
        const t = peek(1)[0];
        if (t === 0) {
          if (!have(4)) return;
          rects = u16(take(4), 2);
          state = "rect";
        } else if (t === 2) {
          take(1); // bell
        } else if (t === 3) {
          if (!have(8)) return;
          const n = u32(peek(8), 4);
          if (!have(8 + n)) return;
          take(8 + n);
        } else {
          return fail("The desktop sent message type " + t + ", which this page does not know.");
        }
        break;
      }
      case "rect": {
        if (rects === 0) {
          frames++;
          canvas.dataset.frames = String(frames);
          requestUpdate(true);
          state = "message";
          break;
        }
        if (rect === null) {
          if (!have(12)) return;
          const b = take(12);
          rect = { x: u16(b, 0), y: u16(b, 2), w: u16(b, 4), h: u16(b, 6), enc: u32(b, 8) };
          if (rect.x + rect.w > width || rect.y + rect.h > height) return fail("The desktop sent a rectangle outside its screen.");
        }
        const r = rect;
        if (r.enc === 0) {
          const n = r.w * r.h * 4;
          if (!have(n)) return;
          const px = take(n);
          if (n > 0) {
            const img = ctx.createImageData(r.w, r.h);
            const d = img.data;
            for (let i = 0; i < n; i += 4) {
              d[i] = px[i + 2];
              d[i + 1] = px[i + 1];
              d[i + 2] = px[i];
              d[i + 3] = 255;
            }
            ctx.putImageData(img, r.x, r.y);
          }
        } else if (r.enc === 1) {
          if (!have(4)) return;
          const b = take(4);
          if (r.w > 0 && r.h > 0) ctx.drawImage(canvas, u16(b, 0), u16(b, 2), r.w, r.h, r.x, r.y, r.w, r.h);
        } else {
          return fail("The desktop sent encoding " + r.enc + ", which this page did not ask for.");
        }
        rect = null;
        rects--;
        break;
      }
      default:
        return;
      }
    }
  }

  ws.addEventListener("open", () => say("Connecting to the desktop…"));
  ws.addEventListener("message", (e) => {
    const b = new Uint8Array(e.data);
    if (b.length === 0) return;
    chunks.push(b);
    queued += b.length;
    parse();
  });
  ws.addEventListener("close", (e) => {
    if (state !== "failed") say("Disconnected" + (e.reason ? ": " + e.reason : ".") + " Reload the page to connect again.", "error");
  });

  // Input: the pointer on the canvas, and keys while it has the focus.
  let buttons = 0;
  function pointer(e) {
    if (state !== "message" && state !== "rect") return;
    const box = canvas.getBoundingClientRect();
    const x = Math.max(0, Math.min(width - 1, Math.floor((e.clientX - box.left) * width / box.width)));
    const y = Math.max(0, Math.min(height - 1, Math.floor((e.clientY - box.top) * height / box.height)));
    send([5, buttons].concat(be16(x), be16(y)));
  }
  const mask = [1, 2, 4];
  canvas.addEventListener("mousemove", pointer);
  canvas.addEventListener("mousedown", (e) => { canvas.focus({ preventScroll: true }); buttons |= mask[e.button] || 0; pointer(e); e.preventDefault(); });
  canvas.addEventListener("mouseup", (e) => { buttons &= ~(mask[e.button] || 0); pointer(e); e.preventDefault(); });
  canvas.addEventListener("contextmenu", (e) => e.preventDefault());
  canvas.addEventListener("wheel", (e) => {
    const b = e.deltaY < 0 ? 8 : 16;
    buttons |= b; pointer(e); buttons &= ~b; pointer(e);
    e.preventDefault();
  }, { passive: false });

  const keysyms = {
    Backspace: 0xff08, Tab: 0xff09, Enter: 0xff0d, Escape: 0xff1b, Delete: 0xffff,
    Home: 0xff50, ArrowLeft: 0xff51, ArrowUp: 0xff52, ArrowRight: 0xff53, ArrowDown: 0xff54,
    PageUp: 0xff55, PageDown: 0xff56, End: 0xff57, Insert: 0xff63,
    Shift: 0xffe1, Control: 0xffe3, Alt: 0xffe9, Meta: 0xffe7, CapsLock: 0xffe5,
  };
  function keysym(e) {
    if (keysyms[e.key]) return keysyms[e.key];
    const f = /^F([1-9]|1[0-2])$/.exec(e.key);
    if (f) return 0xffbd + Number(f[1]);
    if ([...e.key].length === 1) {
      const cp = e.key.codePointAt(0);
      return cp < 0x100 ? cp : 0x01000000 + cp;
    }
    return 0;
  }
  function key(down) {
    return (e) => {
      const k = keysym(e);
      if (!k || (state !== "message" && state !== "rect")) return;
      send([4, down ? 1 : 0, 0, 0].concat(be32(k)));
      e.preventDefault();
    };
  }
  canvas.addEventListener("keydown", key(true));
  canvas.addEventListener("keyup", key(false));
})();
