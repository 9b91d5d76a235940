"""Input sides for the random torchvision networks of the any-network tests (imported by name)."""

#: ResNet-18 and Swin-T take any size (small inputs keep tests fast on a shared CPU); torchvision's ViT checks
#: for its 224 px.
SIZES = {"resnet18": 64, "swin_t": 64, "vit_b_16": 224}
