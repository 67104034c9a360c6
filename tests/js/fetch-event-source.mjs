// A small EventSource for Node (which has none before v22) on top of fetch, with the browser's
// reconnection rules: after a dropped connection it waits `retry` ms and reconnects with
// Last-Event-ID; an HTTP error closes it for good. dropConnection() cuts the current response,
// the way a network failure would, for tests of resumption.

export class FetchEventSource {
  static CONNECTING = 0;
  static OPEN = 1;
  static CLOSED = 2;

  constructor(url) {
    this.url = url;
    this.readyState = FetchEventSource.CONNECTING;
    this.lastEventId = "";
    this.retryMs = 2000;
    this.listeners = new Map();
    this.onopen = null;
    this.onerror = null;
    this.connections = 0;
    this.abort = null;
    queueMicrotask(() => this.#connect());
  }

  addEventListener(type, listener) {
    if (!this.listeners.has(type)) this.listeners.set(type, []);
    this.listeners.get(type).push(listener);
  }

  close() {
    this.readyState = FetchEventSource.CLOSED;
    this.abort?.abort();
  }

  dropConnection() {
    this.abort?.abort();
  }

  async #connect() {
    if (this.readyState === FetchEventSource.CLOSED) return;
    this.connections += 1;
    const abort = new AbortController();
    this.abort = abort;
    const headers = { Accept: "text/event-stream" };
    if (this.lastEventId) headers["Last-Event-ID"] = this.lastEventId;
    let response;
    try {
      response = await fetch(this.url, { headers, signal: abort.signal });
    } catch {
      return this.#lost();
    }
    if (response.status !== 200 || !(response.headers.get("content-type") ?? "").includes("text/event-stream")) {
      this.readyState = FetchEventSource.CLOSED;
      await response.body?.cancel().catch(() => {});
      this.onerror?.({ type: "error", status: response.status });
      return;
    }
    this.readyState = FetchEventSource.OPEN;
    this.onopen?.({ type: "open" });
    try {
      await this.#read(response.body);
    } catch {
      // aborted or broken: reconnect below
    }
    this.#lost();
  }

  #lost() {
    if (this.readyState === FetchEventSource.CLOSED) return;
    this.readyState = FetchEventSource.CONNECTING;
    this.onerror?.({ type: "error" });
    setTimeout(() => this.#connect(), this.retryMs);
  }

  async #read(body) {
    const reader = body.getReader();
    const decoder = new TextDecoder();
    let buffer = "";
    let fields = { event: "", data: [], id: null };
    const dispatch = () => {
      if (fields.id !== null) this.lastEventId = fields.id;
      if (fields.data.length && this.readyState !== FetchEventSource.CLOSED) {
        const type = fields.event || "message";
        const event = { type, data: fields.data.join("\n"), lastEventId: this.lastEventId };
        for (const listener of this.listeners.get(type) ?? []) listener(event);
      }
      fields = { event: "", data: [], id: null };
    };
    for (;;) {
      const { done, value } = await reader.read();
      if (done) return;
      buffer += decoder.decode(value, { stream: true });
      let index;
      while ((index = buffer.indexOf("\n")) !== -1) {
        const line = buffer.slice(0, index).replace(/\r$/, "");
        buffer = buffer.slice(index + 1);
        if (line === "") dispatch();
        else if (!line.startsWith(":")) {
          const colon = line.indexOf(":");
          const field = colon === -1 ? line : line.slice(0, colon);
          const v = colon === -1 ? "" : line.slice(colon + 1).replace(/^ /, "");
          if (field === "event") fields.event = v;
          else if (field === "data") fields.data.push(v);
          else if (field === "id") fields.id = v;
          else if (field === "retry" && /^\d+$/.test(v)) this.retryMs = Number(v);
        }
      }
    }
  }
}
