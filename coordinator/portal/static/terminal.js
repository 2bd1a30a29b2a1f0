// terminal.js is the portal's web terminal: a shell on a lease's box,
// carried by the coordinator's terminal websocket (docs/web-terminal.md).
//
// It is a small terminal emulator of its own: a grid of cells that the
// shell's output is written into by a parser of the common xterm control
// sequences (cursor movement, erasing, scrolling regions, SGR colours,
// the alternate screen), rendered into <pre> rows of <span>s with CSS
// classes (the portal's CSP allows no inline styles). Keys are encoded as
// a terminal does and sent as binary frames; text frames are JSON control
// messages: {"type":"resize","cols","rows"} from here, {"type":"exit",
// "code"} and {"type":"error","message"} from the coordinator.
'use strict';

(function () {
  const DEFAULT = 16; // the default colour (the 16 others are the ANSI ones)
  const HISTORY = 2000; // lines kept above the screen
  const ESC = '\x1b';

  // An attribute is a number: foreground bits 0-4, background 5-9, then
  // bold, underline and inverse.
  const BOLD = 1 << 10;
  const UNDERLINE = 1 << 11;
  const INVERSE = 1 << 12;
  const PLAIN = DEFAULT | (DEFAULT << 5);
  const fgOf = (a) => a & 31;
  const bgOf = (a) => (a >> 5) & 31;
  const withFg = (a, c) => (a & ~31) | c;
  const withBg = (a, c) => (a & ~(31 << 5)) | (c << 5);

  // nearest16 maps an xterm 256-colour index, or an RGB colour, to one of
  // the 16 colours the stylesheet has.
  function nearestRGB(r, g, b) {
    const hi = Math.max(r, g, b);
    let c = (r > hi / 2 ? 1 : 0) | (g > hi / 2 ? 2 : 0) | (b > hi / 2 ? 4 : 0);
    if (hi < 64) return 0;
    if (c === 7 && hi < 200) return hi < 140 ? 8 : 7;
    return hi > 200 ? c + 8 : c;
  }
  function nearest16(n) {
    if (n < 16) return n;
    if (n >= 232) {
      const level = n - 232;
      return level < 6 ? 0 : level < 12 ? 8 : level < 18 ? 7 : 15;
    }
    n -= 16;
    const step = [0, 95, 135, 175, 215, 255];
    return nearestRGB(step[Math.floor(n / 36)], step[Math.floor(n / 6) % 6], step[n % 6]);
  }

  function blankLine(cols, attr) {
    return { ch: new Array(cols).fill(' '), at: new Array(cols).fill(attr) };
  }

  // Screen is the terminal's state: two buffers of lines (the normal one
  // and the alternate one full-screen programs use), the cursor, the
  // scrolling region, the modes, and the parser's state.
  class Screen {
    constructor(cols, rows, reply, scrolledOff) {
      this.cols = cols;
      this.rows = rows;
      this.reply = reply; // answers to the shell's queries
      this.scrolledOff = scrolledOff; // a line leaving the top of the normal screen
      this.normal = this.blankLines(rows);
      this.alt = null; // the alternate screen, while it is shown
      this.lines = this.normal;
      this.dirty = new Set();
      this.x = 0;
      this.y = 0;
      this.attr = PLAIN;
      this.wrapPending = false;
      this.saved = null;
      this.top = 0;
      this.bottom = rows - 1;
      this.appCursor = false;
      this.autowrap = true;
      this.cursorVisible = true;
      this.bracketedPaste = false;
      this.state = 'ground';
      this.params = '';
      this.allDirty();
    }

    blankLines(n) {
      const out = [];
      for (let i = 0; i < n; i++) out.push(blankLine(this.cols, PLAIN));
      return out;
    }

    allDirty() {
      for (let i = 0; i < this.rows; i++) this.dirty.add(i);
    }

    // The attribute erased cells get: the current background only.
    blankAttr() {
      return withBg(PLAIN, bgOf(this.attr));
    }

    write(text) {
      for (const ch of text) this.feed(ch);
    }

    feed(ch) {
      switch (this.state) {
        case 'ground':
          if (ch < ' ' || ch === '\x7f') this.control(ch);
          else this.print(ch);
          return;
        case 'esc':
          this.escape(ch);
          return;
        case 'csi':
          if (ch >= '@' && ch <= '~') {
            this.state = 'ground';
            this.csi(ch);
          } else if (ch === ESC) {
            this.state = 'esc';
          } else if (ch < ' ') {
            this.control(ch); // C0 controls act inside a sequence
          } else {
            this.params += ch;
          }
          return;
        case 'osc': // a title, a colour: not shown; ends with BEL or ST
        case 'string': // DCS, PM, APC: ignored up to ST
          if (ch === '\x07' && this.state === 'osc') this.state = 'ground';
          else if (ch === ESC) this.state = this.state + '-esc';
          return;
        case 'osc-esc':
        case 'string-esc':
          this.state = ch === '\\' ? 'ground' : this.state.slice(0, -4);
          return;
        case 'charset': // ESC ( B and friends: the character set is ignored
          this.state = 'ground';
          return;
      }
    }

    control(ch) {
      switch (ch) {
        case '\b':
          this.wrapPending = false;
          if (this.x > 0) this.x--;
          break;
        case '\t':
          this.wrapPending = false;
          this.x = Math.min(this.cols - 1, (Math.floor(this.x / 8) + 1) * 8);
          break;
        case '\n':
        case '\v':
        case '\f':
          this.lineFeed();
          break;
        case '\r':
          this.wrapPending = false;
          this.x = 0;
          break;
        case ESC:
          this.state = 'esc';
          break;
      }
    }

    print(ch) {
      if (this.wrapPending) {
        this.wrapPending = false;
        this.x = 0;
        this.lineFeed();
      }
      const line = this.lines[this.y];
      line.ch[this.x] = ch;
      line.at[this.x] = this.attr;
      this.dirty.add(this.y);
      if (this.x === this.cols - 1) this.wrapPending = this.autowrap;
      else this.x++;
    }

    lineFeed() {
      this.wrapPending = false;
      if (this.y === this.bottom) this.scrollUp(1);
      else if (this.y < this.rows - 1) this.y++;
    }

    reverseIndex() {
      this.wrapPending = false;
      if (this.y === this.top) this.scrollDown(1);
      else if (this.y > 0) this.y--;
    }

    // scrollUp moves the lines of the scrolling region up by n; lines
    // scrolling off the top of the whole normal screen go to the history
    // (not those a delete-lines removes: deleted is true).
    scrollUp(n, deleted) {
      n = Math.min(n, this.bottom - this.top + 1);
      for (let i = 0; i < n; i++) {
        const gone = this.lines.splice(this.top, 1)[0];
        this.lines.splice(this.bottom, 0, blankLine(this.cols, this.blankAttr()));
        if (!deleted && this.top === 0 && this.lines === this.normal) this.scrolledOff(gone);
      }
      for (let i = this.top; i <= this.bottom; i++) this.dirty.add(i);
    }

    scrollDown(n) {
      n = Math.min(n, this.bottom - this.top + 1);
      for (let i = 0; i < n; i++) {
        this.lines.splice(this.bottom, 1);
        this.lines.splice(this.top, 0, blankLine(this.cols, this.blankAttr()));
      }
      for (let i = this.top; i <= this.bottom; i++) this.dirty.add(i);
    }

    escape(ch) {
      this.state = 'ground';
      switch (ch) {
        case '[':
          this.state = 'csi';
          this.params = '';
          break;
        case ']':
          this.state = 'osc';
          break;
        case 'P':
        case 'X':
        case '^':
        case '_':
          this.state = 'string';
          break;
        case '(':
        case ')':
        case '*':
        case '+':
          this.state = 'charset';
          break;
        case '7':
          this.saveCursor();
          break;
        case '8':
          this.restoreCursor();
          break;
        case 'D':
          this.lineFeed();
          break;
        case 'E':
          this.x = 0;
          this.lineFeed();
          break;
        case 'M':
          this.reverseIndex();
          break;
        case 'c':
          this.reset();
          break;
      }
    }

    reset() {
      this.showAlt(false);
      this.normal = this.blankLines(this.rows);
      this.lines = this.normal;
      this.x = this.y = 0;
      this.attr = PLAIN;
      this.wrapPending = false;
      this.top = 0;
      this.bottom = this.rows - 1;
      this.appCursor = this.bracketedPaste = false;
      this.autowrap = this.cursorVisible = true;
      this.allDirty();
    }

    saveCursor() {
      this.saved = { x: this.x, y: this.y, attr: this.attr };
    }

    restoreCursor() {
      const s = this.saved || { x: 0, y: 0, attr: PLAIN };
      this.x = Math.min(s.x, this.cols - 1);
      this.y = Math.min(s.y, this.rows - 1);
      this.attr = s.attr;
      this.wrapPending = false;
    }

    showAlt(on) {
      if (on === (this.alt !== null)) return;
      if (on) {
        this.alt = this.blankLines(this.rows);
        this.lines = this.alt;
      } else {
        this.alt = null;
        this.lines = this.normal;
      }
      this.allDirty();
    }

    moveTo(x, y) {
      this.wrapPending = false;
      this.x = Math.max(0, Math.min(this.cols - 1, x));
      this.y = Math.max(0, Math.min(this.rows - 1, y));
    }

    erase(y, from, to) {
      const line = this.lines[y];
      const a = this.blankAttr();
      for (let x = Math.max(0, from); x < Math.min(this.cols, to); x++) {
        line.ch[x] = ' ';
        line.at[x] = a;
      }
      this.dirty.add(y);
    }

    csi(final) {
      let priv = '';
      let body = this.params;
      if (body && '?>=<'.includes(body[0])) {
        priv = body[0];
        body = body.slice(1);
      }
      if (/[^0-9;:]/.test(body)) return; // intermediates: nothing we handle
      const p = body === '' ? [] : body.split(';').map((s) => parseInt(s, 10) || 0);
      const n = p[0] || 1; // the usual "count, at least one"
      if (priv === '?') {
        if (final === 'h' || final === 'l') this.privateMode(p, final === 'h');
        return;
      }
      if (priv === '>') {
        if (final === 'c') this.reply(ESC + '[>0;0;0c');
        return;
      }
      if (priv) return;
      const { x, y } = this;
      switch (final) {
        case '@': { // ICH
          const line = this.lines[y];
          const k = Math.min(n, this.cols - x);
          line.ch.splice(x, 0, ...new Array(k).fill(' '));
          line.at.splice(x, 0, ...new Array(k).fill(this.blankAttr()));
          line.ch.length = line.at.length = this.cols;
          this.dirty.add(y);
          break;
        }
        case 'A': this.moveTo(x, y - n); break; // CUU
        case 'B': case 'e': this.moveTo(x, y + n); break; // CUD
        case 'C': case 'a': this.moveTo(x + n, y); break; // CUF
        case 'D': this.moveTo(x - n, y); break; // CUB
        case 'E': this.moveTo(0, y + n); break; // CNL
        case 'F': this.moveTo(0, y - n); break; // CPL
        case 'G': case '`': this.moveTo(n - 1, y); break; // CHA
        case 'd': this.moveTo(x, n - 1); break; // VPA
        case 'H': case 'f': this.moveTo((p[1] || 1) - 1, (p[0] || 1) - 1); break; // CUP
        case 'J': this.eraseDisplay(p[0] || 0); break; // ED
        case 'K': { // EL
          const mode = p[0] || 0;
          if (mode === 0) this.erase(y, x, this.cols);
          else if (mode === 1) this.erase(y, 0, x + 1);
          else this.erase(y, 0, this.cols);
          break;
        }
        case 'L': case 'M': { // IL, DL: within the scrolling region
          if (y < this.top || y > this.bottom) break;
          const top = this.top;
          this.top = y;
          if (final === 'L') this.scrollDown(n);
          else this.scrollUp(n, true);
          this.top = top;
          this.x = 0;
          break;
        }
        case 'P': { // DCH
          const line = this.lines[y];
          const k = Math.min(n, this.cols - x);
          line.ch.splice(x, k);
          line.at.splice(x, k);
          for (let i = 0; i < k; i++) {
            line.ch.push(' ');
            line.at.push(this.blankAttr());
          }
          this.dirty.add(y);
          break;
        }
        case 'X': this.erase(y, x, x + n); break; // ECH
        case 'S': this.scrollUp(n); break; // SU
        case 'T': this.scrollDown(n); break; // SD
        case 'm': this.sgr(p.length ? p : [0]); break;
        case 'r': { // DECSTBM
          const top = (p[0] || 1) - 1;
          const bottom = (p[1] || this.rows) - 1;
          if (top < bottom && bottom < this.rows) {
            this.top = top;
            this.bottom = bottom;
            this.moveTo(0, 0);
          }
          break;
        }
        case 's': this.saveCursor(); break;
        case 'u': this.restoreCursor(); break;
        case 'n': // DSR
          if (p[0] === 6) this.reply(ESC + '[' + (y + 1) + ';' + (x + 1) + 'R');
          else if (p[0] === 5) this.reply(ESC + '[0n');
          break;
        case 'c': // DA
          if (!p[0]) this.reply(ESC + '[?1;2c');
          break;
      }
    }

    eraseDisplay(mode) {
      if (mode === 0) {
        this.erase(this.y, this.x, this.cols);
        for (let i = this.y + 1; i < this.rows; i++) this.erase(i, 0, this.cols);
      } else if (mode === 1) {
        for (let i = 0; i < this.y; i++) this.erase(i, 0, this.cols);
        this.erase(this.y, 0, this.x + 1);
      } else {
        for (let i = 0; i < this.rows; i++) this.erase(i, 0, this.cols);
      }
    }

    privateMode(p, on) {
      for (const m of p) {
        switch (m) {
          case 1: this.appCursor = on; break;
          case 7: this.autowrap = on; break;
          case 25: this.cursorVisible = on; this.dirty.add(this.y); break;
          case 47: case 1047: this.showAlt(on); break;
          case 1049:
            if (on) this.saveCursor();
            this.showAlt(on);
            if (on) this.eraseDisplay(2);
            else this.restoreCursor();
            break;
          case 2004: this.bracketedPaste = on; break;
        }
      }
    }

    sgr(p) {
      for (let i = 0; i < p.length; i++) {
        const c = p[i];
        if (c === 0) this.attr = PLAIN;
        else if (c === 1) this.attr |= BOLD;
        else if (c === 4) this.attr |= UNDERLINE;
        else if (c === 7) this.attr |= INVERSE;
        else if (c === 22) this.attr &= ~BOLD;
        else if (c === 24) this.attr &= ~UNDERLINE;
        else if (c === 27) this.attr &= ~INVERSE;
        else if (c >= 30 && c <= 37) this.attr = withFg(this.attr, c - 30);
        else if (c === 39) this.attr = withFg(this.attr, DEFAULT);
        else if (c >= 40 && c <= 47) this.attr = withBg(this.attr, c - 40);
        else if (c === 49) this.attr = withBg(this.attr, DEFAULT);
        else if (c >= 90 && c <= 97) this.attr = withFg(this.attr, c - 90 + 8);
        else if (c >= 100 && c <= 107) this.attr = withBg(this.attr, c - 100 + 8);
        else if (c === 38 || c === 48) {
          let colour = null;
          if (p[i + 1] === 5) {
            colour = nearest16(p[i + 2] || 0);
            i += 2;
          } else if (p[i + 1] === 2) {
            colour = nearestRGB(p[i + 2] || 0, p[i + 3] || 0, p[i + 4] || 0);
            i += 4;
          }
          if (colour !== null) this.attr = c === 38 ? withFg(this.attr, colour) : withBg(this.attr, colour);
        }
      }
    }

    // resize keeps what fits: lines pushed off the top go to the
    // history, the cursor stays on its line.
    resize(cols, rows) {
      const fit = (lines) => {
        for (const line of lines) {
          while (line.ch.length < cols) {
            line.ch.push(' ');
            line.at.push(PLAIN);
          }
          line.ch.length = line.at.length = cols;
        }
      };
      this.cols = cols;
      fit(this.normal);
      if (this.alt) fit(this.alt);
      for (const buf of [this.normal, this.alt]) {
        if (!buf) continue;
        while (buf.length > rows) {
          // Drop blank lines below the cursor first, then lines above.
          if (buf === this.lines && this.y < buf.length - 1) buf.pop();
          else {
            const gone = buf.shift();
            if (buf === this.normal) this.scrolledOff(gone);
            if (buf === this.lines) this.y--;
          }
        }
        while (buf.length < rows) buf.push(blankLine(cols, PLAIN));
      }
      this.rows = rows;
      this.top = 0;
      this.bottom = rows - 1;
      this.moveTo(this.x, this.y);
      this.dirty.clear();
      this.allDirty();
    }
  }

  // classesOf is the CSS classes of a cell's attribute.
  function classesOf(a) {
    let fg = fgOf(a);
    let bg = bgOf(a);
    const out = [];
    if (a & INVERSE) {
      [fg, bg] = [bg, fg];
      out.push(fg === DEFAULT ? 'fi' : 'f' + fg, bg === DEFAULT ? 'bi' : 'b' + bg);
    } else {
      if (fg !== DEFAULT) out.push('f' + fg);
      if (bg !== DEFAULT) out.push('b' + bg);
    }
    if (a & BOLD) out.push('bold');
    if (a & UNDERLINE) out.push('ul');
    return out.join(' ');
  }

  // renderLine fills el with line's cells, one span per run of cells of
  // one attribute; cursor, when not -1, is the column of the cursor.
  function renderLine(el, line, cursor) {
    const runs = [];
    let start = 0;
    for (let x = 1; x <= line.ch.length; x++) {
      if (x === line.ch.length || line.at[x] !== line.at[start] || x === cursor || x === cursor + 1) {
        runs.push([start, x]);
        start = x;
      }
    }
    el.replaceChildren();
    for (const [from, to] of runs) {
      const span = document.createElement('span');
      span.textContent = line.ch.slice(from, to).join('');
      let cls = classesOf(line.at[from]);
      if (from === cursor) cls += ' cursor';
      if (cls.trim()) span.className = cls.trim();
      el.appendChild(span);
    }
  }

  // Keys that are not text, as xterm encodes them; the arrows, Home and
  // End have an application-cursor form, and all of these take modifiers.
  const KEYS = {
    ArrowUp: 'A', ArrowDown: 'B', ArrowRight: 'C', ArrowLeft: 'D', Home: 'H', End: 'F',
  };
  const TILDE_KEYS = {
    Insert: 2, Delete: 3, PageUp: 5, PageDown: 6,
    F5: 15, F6: 17, F7: 18, F8: 19, F9: 20, F10: 21, F11: 23, F12: 24,
  };
  const SS3_KEYS = { F1: 'P', F2: 'Q', F3: 'R', F4: 'S' };

  // encodeKey is what a keydown sends to the shell, or null for keys the
  // browser keeps (copy and paste shortcuts, lone modifiers).
  function encodeKey(e, appCursor) {
    const k = e.key;
    const mod = 1 + (e.shiftKey ? 1 : 0) + (e.altKey ? 2 : 0) + (e.ctrlKey ? 4 : 0);
    if (e.metaKey) return null;
    // AltGr (reported as Ctrl and Alt on some systems) types a character.
    if (e.getModifierState && e.getModifierState('AltGraph') && [...k].length === 1) return k;
    if (e.ctrlKey && e.shiftKey && (k === 'C' || k === 'V')) return null;
    if (k in KEYS) {
      if (mod > 1) return ESC + '[1;' + mod + KEYS[k];
      return ESC + (appCursor ? 'O' : '[') + KEYS[k];
    }
    if (k in TILDE_KEYS) return ESC + '[' + TILDE_KEYS[k] + (mod > 1 ? ';' + mod : '') + '~';
    if (k in SS3_KEYS) return mod > 1 ? ESC + '[1;' + mod + SS3_KEYS[k] : ESC + 'O' + SS3_KEYS[k];
    switch (k) {
      case 'Enter': return e.altKey ? ESC + '\r' : '\r';
      case 'Backspace': return e.ctrlKey ? '\b' : e.altKey ? ESC + '\x7f' : '\x7f';
      case 'Tab': return e.shiftKey ? ESC + '[Z' : '\t';
      case 'Escape': return ESC;
    }
    if ([...k].length !== 1) return null; // Shift, Control, Dead, ...
    let s = k;
    if (e.ctrlKey) {
      const c = k.toLowerCase();
      if (c >= 'a' && c <= 'z') s = String.fromCharCode(c.charCodeAt(0) - 96);
      else if (c === ' ' || c === '@' || c === '2') s = '\x00';
      else if (c === '[' || c === '3') s = ESC;
      else if (c === '\\' || c === '4') s = '\x1c';
      else if (c === ']' || c === '5') s = '\x1d';
      else if (c === '^' || c === '6') s = '\x1e';
      else if (c === '_' || c === '-' || c === '7') s = '\x1f';
      else if (c === '?' || c === '8') s = '\x7f';
      else return null;
    }
    return e.altKey ? ESC + s : s;
  }

  // Terminal ties a Screen to the page and to the websocket.
  class Terminal {
    constructor(root) {
      this.root = root;
      this.status = document.getElementById('term-status');
      this.history = root.querySelector('.term-history');
      this.view = root.querySelector('.term-screen');
      this.encoder = new TextEncoder();
      this.decoder = new TextDecoder('utf-8');
      this.ended = false;
      this.frame = 0;
      const { cols, rows } = this.fit();
      this.screen = new Screen(cols, rows, (s) => this.send(s), (line) => this.keep(line));
      this.rowEls = [];
      this.layoutRows();
    }

    // fit is how many cells fit in the terminal's box.
    fit() {
      const probe = document.createElement('span');
      probe.textContent = 'M'.repeat(10);
      this.view.appendChild(probe);
      const box = probe.getBoundingClientRect();
      probe.remove();
      const cw = box.width / 10 || 8;
      const ch = box.height || 16;
      const style = getComputedStyle(this.root);
      const w = this.root.clientWidth - parseFloat(style.paddingLeft) - parseFloat(style.paddingRight);
      const h = this.root.clientHeight - parseFloat(style.paddingTop) - parseFloat(style.paddingBottom);
      return {
        cols: Math.max(20, Math.min(1000, Math.floor(w / cw))),
        rows: Math.max(5, Math.min(500, Math.floor(h / ch))),
      };
    }

    // layoutRows makes a row element per screen row, and records the
    // size on the page (data-cols, data-rows).
    layoutRows() {
      this.root.dataset.cols = this.screen.cols;
      this.root.dataset.rows = this.screen.rows;
      while (this.rowEls.length < this.screen.rows) {
        const el = document.createElement('div');
        el.className = 'term-row';
        this.view.appendChild(el);
        this.rowEls.push(el);
      }
      while (this.rowEls.length > this.screen.rows) this.rowEls.pop().remove();
    }

    // keep moves a line that scrolled off the screen into the history.
    keep(line) {
      const el = document.createElement('div');
      el.className = 'term-row';
      renderLine(el, line, -1);
      this.history.appendChild(el);
      while (this.history.childElementCount > HISTORY) this.history.firstElementChild.remove();
    }

    connect() {
      const path = this.root.dataset.ws;
      const proto = location.protocol === 'https:' ? 'wss:' : 'ws:';
      const url = proto + '//' + location.host + path + '?cols=' + this.screen.cols + '&rows=' + this.screen.rows;
      this.ws = new WebSocket(url);
      this.ws.binaryType = 'arraybuffer';
      this.setStatus('Connecting…');
      this.ws.onopen = () => this.setStatus('Connected.');
      this.ws.onmessage = (ev) => this.receive(ev.data);
      this.ws.onclose = () => this.closed();
    }

    receive(data) {
      if (typeof data === 'string') {
        let m;
        try {
          m = JSON.parse(data);
        } catch (err) {
          return;
        }
        if (m.type === 'exit') this.end('The shell exited with code ' + m.code + '.');
        else if (m.type === 'error') this.setStatus(m.message, true);
        return;
      }
      this.screen.write(this.decoder.decode(new Uint8Array(data), { stream: true }));
      this.schedule();
    }

    closed() {
      if (!this.ended) this.end(this.status.classList.contains('error') ? this.status.textContent : 'Disconnected.');
    }

    end(msg) {
      this.ended = true;
      this.setStatus(msg + ' Reload the page for a new shell.', this.status.classList.contains('error'));
      this.root.classList.add('ended');
    }

    setStatus(msg, isError) {
      this.status.textContent = msg;
      this.status.classList.toggle('error', !!isError);
    }

    send(s) {
      if (this.ws && this.ws.readyState === WebSocket.OPEN) this.ws.send(this.encoder.encode(s));
    }

    sendControl(m) {
      if (this.ws && this.ws.readyState === WebSocket.OPEN) this.ws.send(JSON.stringify(m));
    }

    schedule() {
      if (!this.frame) this.frame = requestAnimationFrame(() => this.render());
    }

    render() {
      this.frame = 0;
      const s = this.screen;
      const atBottom = this.root.scrollTop + this.root.clientHeight >= this.root.scrollHeight - 4;
      if (this.cursorRow !== undefined && this.cursorRow !== s.y) s.dirty.add(this.cursorRow);
      s.dirty.add(s.y);
      for (const y of s.dirty) {
        if (y < this.rowEls.length) renderLine(this.rowEls[y], s.lines[y], y === s.y && s.cursorVisible ? s.x : -1);
      }
      s.dirty.clear();
      this.cursorRow = s.y;
      if (atBottom) this.root.scrollTop = this.root.scrollHeight;
    }

    resized() {
      if (!this.root.clientWidth || !this.root.clientHeight) return; // not shown
      const { cols, rows } = this.fit();
      if (cols === this.screen.cols && rows === this.screen.rows) return;
      this.screen.resize(cols, rows);
      this.layoutRows();
      this.schedule();
      this.sendControl({ type: 'resize', cols, rows });
    }

    listen() {
      this.root.addEventListener('keydown', (e) => {
        if (e.isComposing) return;
        const s = encodeKey(e, this.screen.appCursor);
        if (s === null) return;
        e.preventDefault();
        this.send(s);
        this.root.scrollTop = this.root.scrollHeight;
      });
      // A paste goes to the focused element, or to the body when that is
      // not editable: the document sees both.
      document.addEventListener('paste', (e) => {
        if (document.activeElement !== this.root) return;
        let text = e.clipboardData.getData('text/plain');
        e.preventDefault();
        if (!text) return;
        text = text.replace(/\r\n?|\n/g, '\r');
        if (this.screen.bracketedPaste) text = ESC + '[200~' + text.replaceAll(ESC + '[201~', '') + ESC + '[201~';
        this.send(text);
      });
      this.root.addEventListener('mouseup', () => {
        if (!window.getSelection().toString()) this.root.focus();
      });
      let pending = 0;
      window.addEventListener('resize', () => {
        if (!pending) pending = requestAnimationFrame(() => { pending = 0; this.resized(); });
      });
    }
  }

  // The emulator, for the portal's tests.
  window.crabboxTerminal = { Screen };

  window.addEventListener('DOMContentLoaded', () => {
    const root = document.getElementById('terminal');
    if (!root) return;
    const t = new Terminal(root);
    t.listen();
    t.render();
    t.connect();
    root.focus();
  });
})();
