// A fetch that a test drives by hand, for the client's own stream reader: each call takes the
// next answer the test queued. An answer is an HTTP refusal ({status, headers, body}), a thrown
// network error ({network: true}), or an event stream the test writes to while it is open
// (stream(): .send(frame), .end(), .closed). Aborting the request (the watch's close()) errors
// the stream, as a real fetch does.

export function sse(type, data, id) {
  return `${id === undefined ? "" : `id: ${id}\n`}event: ${type}\ndata: ${JSON.stringify(data)}\n\n`;
}

export class FakeFetch {
  constructor() {
    this.calls = [];
    this.answers = [];
    this.waiting = [];
    this.fetch = (url, init = {}) => this.#answer(url, init);
  }

  /** Queue an HTTP answer that is not a stream. */
  refuse(status, headers = {}, body = "") {
    this.answers.push({ status, headers, body });
  }

  /** Queue a failure to connect. */
  networkError() {
    this.answers.push({ network: true });
  }

  /** Queue an event stream; returns its handle (write with send(), finish with end()). */
  stream(initial = "") {
    let controller;
    const encoder = new TextEncoder();
    const handle = {
      closed: false,
      body: new ReadableStream({
        start: (c) => {
          controller = c;
          if (initial) c.enqueue(encoder.encode(initial));
        },
        cancel: () => {
          handle.closed = true;
        },
      }),
      send: (text) => controller.enqueue(encoder.encode(text)),
      end: () => {
        handle.closed = true;
        controller.close();
      },
      abort: () => {
        if (handle.closed) return;
        handle.closed = true;
        controller.error(new DOMException("aborted", "AbortError"));
      },
    };
    this.answers.push({ stream: handle });
    return handle;
  }

  /** Resolves when the fetch has been called `n` times in all. */
  called(n, timeoutMs = 5000) {
    if (this.calls.length >= n) return Promise.resolve();
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`fetch called ${this.calls.length} times, not ${n}`)), timeoutMs);
      this.waiting.push({ n, resolve: () => (clearTimeout(timer), resolve()) });
    });
  }

  async #answer(url, init) {
    this.calls.push({ url, init });
    for (const w of this.waiting.filter((w) => this.calls.length >= w.n)) w.resolve();
    this.waiting = this.waiting.filter((w) => this.calls.length < w.n);
    const answer = this.answers.shift();
    if (!answer) throw new Error(`no answer queued for fetch #${this.calls.length} (${url})`);
    if (init.signal?.aborted) throw new DOMException("aborted", "AbortError");
    if (answer.network) throw new TypeError("fetch failed");
    if (answer.stream) {
      init.signal?.addEventListener("abort", () => answer.stream.abort());
      return new Response(answer.stream.body, { status: 200, headers: { "content-type": "text/event-stream" } });
    }
    return new Response(answer.body, { status: answer.status, headers: answer.headers });
  }
}
