"""The pod annotations both programs read: resources, class requests and CPU preferences.

Pure code over plain mappings, shared by the webhook (at admission) and the enforcer (at
CreateContainer), so the two can never disagree on which key wins.
"""

from enforcer.annotations.classes import (
    CLASS_KINDS,
    ClassAccess,
    ClassKind,
    ClassRequest,
    ClassRequestError,
    class_keys,
    resolve_class,
    validate_class_annotations,
)
from enforcer.annotations.keys import DOMAIN, RESOURCES_KEY, RESOURCES_KEYS
from enforcer.annotations.preferences import (
    PREFERENCES,
    PreferenceError,
    preference_keys,
    resolve_preference,
    validate_preference_annotations,
)
from enforcer.annotations.resources import (
    ContainerResources,
    ResourcesAnnotation,
    ResourcesAnnotationError,
)

__all__ = [
    "CLASS_KINDS",
    "DOMAIN",
    "PREFERENCES",
    "RESOURCES_KEY",
    "RESOURCES_KEYS",
    "ClassAccess",
    "ClassKind",
    "ClassRequest",
    "ClassRequestError",
    "ContainerResources",
    "PreferenceError",
    "ResourcesAnnotation",
    "ResourcesAnnotationError",
    "class_keys",
    "preference_keys",
    "resolve_class",
    "resolve_preference",
    "validate_class_annotations",
    "validate_preference_annotations",
]
