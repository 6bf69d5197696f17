import {
  defaultResource,
  detectResources,
  hostDetector,
  osDetector,
  processDetector,
  serviceInstanceIdDetector,
  type Resource,
  type ResourceDetector,
} from '@opentelemetry/resources';

/**
 * The process's resource, detected as the SDK would (OTEL_NODE_RESOURCE_DETECTORS: service, host, process, all,
 * none; default all three) and settled before the SDK starts. The host detector's `host.id` is read
 * asynchronously; a span exporter waits for it, but the Prometheus exporter reads the resource at every scrape
 * and the SDK logs an error each time it is still unsettled — which, with nothing else waiting, is for ever.
 * OTEL_RESOURCE_ATTRIBUTES and OTEL_SERVICE_NAME are applied by the caller on top (sdk.ts).
 */
export async function settledResource(env: NodeJS.ProcessEnv): Promise<Resource> {
  const names = (env.OTEL_NODE_RESOURCE_DETECTORS ?? '')
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean);
  const wanted =
    names.length === 0 || names.includes('all') ? ['service', 'host', 'process'] : names.includes('none') ? [] : names;
  const detectors: ResourceDetector[] = [];
  if (wanted.includes('service')) detectors.push(serviceInstanceIdDetector);
  if (wanted.includes('host')) detectors.push(hostDetector, osDetector);
  if (wanted.includes('process')) detectors.push(processDetector);
  const detected = detectResources({ detectors });
  await detected.waitForAsyncAttributes?.();
  return defaultResource().merge(detected);
}
