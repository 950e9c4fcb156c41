// The side effect: a call to the service your workers exist for. Here a stand-in
// that answers at once; replace it with your client. Pass the idempotency key
// on, so that the downstream itself dedupes a call retried after a crash.
export interface Order {
  orderId: string;
  qty?: number;
}

export interface CarrierAnswer {
  status: number;
  trackingId?: string;
  retryAfterMs?: number;
}

export async function shipOrder(
  order: Order,
  idempotencyKey: string,
  signal: AbortSignal,
): Promise<CarrierAnswer> {
  signal.throwIfAborted(); // the drain deadline passed: stop before calling out
  return { status: 200, trackingId: `trk-${idempotencyKey}` };
}
