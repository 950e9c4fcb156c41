// Runs once per `vitest run` for the integration project: finds (or starts)
// RabbitMQ and PostgreSQL, starts one Kubernetes control plane (or uses the
// cluster named by KUBECONFIG when USE_EXISTING_CLUSTER=true), installs the
// CRDs from crds/, and hands the addresses to the test files. A service that
// cannot be had is recorded; the suites that need it fail naming it.
import type { TestProject } from 'vitest/node';
import { startControlPlane, type ControlPlane } from './control-plane.js';
import { installCrds } from './kube.js';
import { findServices, type Missing, type ServiceUrls } from './services.js';

export interface GroundInfo extends ServiceUrls {
  kubeconfigPath: string;
  runsWorkloads: boolean;
  missing: Missing;
}

declare module 'vitest' {
  export interface ProvidedContext {
    ground: GroundInfo;
  }
}

export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  const services = await findServices();
  const missing: Missing = { ...services.missing };
  let plane: ControlPlane | undefined;
  let kubeconfigPath = '';
  let runsWorkloads = false;

  try {
    if (process.env.USE_EXISTING_CLUSTER === 'true') {
      if (!process.env.KUBECONFIG) throw new Error('USE_EXISTING_CLUSTER=true needs KUBECONFIG');
      kubeconfigPath = process.env.KUBECONFIG;
      runsWorkloads = true;
    } else {
      plane = await startControlPlane({ beforeControllers: installCrds });
      kubeconfigPath = plane.kubeconfigPath;
      runsWorkloads = plane.runsWorkloads;
    }
    // Again for an existing cluster; a no-op apply for ours.
    await installCrds(kubeconfigPath);
  } catch (err) {
    missing.kube = `Kubernetes control plane unavailable: ${(err as Error).message}`;
  }

  project.provide('ground', { ...services.urls, kubeconfigPath, runsWorkloads, missing });
  return async () => {
    await plane?.stop();
    await services.stop();
  };
}
