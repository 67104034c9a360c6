// A stand-in for the browser's EventSource that a test drives by hand: open(), emit(), drop()
// (a lost connection the browser will retry) and refuse() (an HTTP error: the browser gives up).

export class FakeEventSource {
  static CONNECTING = 0;
  static OPEN = 1;
  static CLOSED = 2;
  static instances = [];

  constructor(url) {
    this.url = url;
    this.readyState = FakeEventSource.CONNECTING;
    this.listeners = new Map();
    this.onopen = null;
    this.onerror = null;
    this.closed = false;
    FakeEventSource.instances.push(this);
  }

  static last() {
    return FakeEventSource.instances.at(-1);
  }

  addEventListener(type, listener) {
    if (!this.listeners.has(type)) this.listeners.set(type, []);
    this.listeners.get(type).push(listener);
  }

  close() {
    this.closed = true;
    this.readyState = FakeEventSource.CLOSED;
  }

  open() {
    this.readyState = FakeEventSource.OPEN;
    this.onopen?.({ type: "open" });
  }

  emit(type, data, id) {
    if (this.closed) throw new Error(`event ${type} sent to a closed EventSource`);
    const event = { type, data: JSON.stringify(data), lastEventId: id === undefined ? "" : String(id) };
    for (const listener of this.listeners.get(type) ?? []) listener(event);
  }

  drop() {
    this.readyState = FakeEventSource.CONNECTING;
    this.onerror?.({ type: "error" });
  }

  refuse() {
    this.readyState = FakeEventSource.CLOSED;
    this.onerror?.({ type: "error" });
  }
}
