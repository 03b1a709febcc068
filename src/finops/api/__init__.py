"""The API contract of finops.stakater.com/v1alpha1: models, CEL rule table, CRDs, validator."""
